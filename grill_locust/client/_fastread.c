/* _fastread: the poller's read of one stamped socket, in C.

   read_event(fd, offset, between) -> (data, t, event)

   One non-blocking recvmsg() of up to READ_BYTES from `fd` (a plain TCP socket with SO_TIMESTAMPNS
   on), and its arrival time `t` on the perf_counter clock (CLOCK_MONOTONIC): the kernel's stamp
   minus `offset` (`_arrival.wall_offset()`), never later than the moment the read returned; that
   moment when the kernel sent no stamp. When `between` is true (the stream's parsers sit between
   two events) and the bytes read are exactly one whole HTTP chunk holding one SSE event of one
   `data:` line -- nearly every read of a stream -- `event` is that line's data and `data` is None;
   otherwise `data` is the bytes read (b"" at the end of the stream) and `event` None.

   It does what `_arrival.read` followed by `_http.one_whole_chunk` and `_sse.single_data_event` do
   (tests/client/test_fastread.py holds the two to the same answers), without the Python objects
   in between: on a 2-CPU VM that is about 4 of the ~19 µs of CPU a streamed event cost.
   Errors are raised as by the socket module (BlockingIOError when nothing is ready); EINTR is
   retried (PEP 475). The call never releases the GIL (the socket is non-blocking), which guards
   the static buffer. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define READ_BYTES 65536

#ifdef SCM_TIMESTAMPNS
#define STAMP_TYPE SCM_TIMESTAMPNS
#else
#define STAMP_TYPE (-1)
#endif

static char buffer[READ_BYTES];

/* Where the data of `data[0:n]` lies when it is exactly one chunk `<hex size>\r\n<body>\r\n`
   (at most 8 hex digits, size > 0, no extensions) whose body is `data:[ ]<line>\n\n` with no CR or
   LF inside the line; 0 otherwise. As `one_whole_chunk` + `single_data_event`. */
static int one_event(const char *data, Py_ssize_t n, Py_ssize_t *start, Py_ssize_t *end)
{
    Py_ssize_t digits = 0, size = 0;
    while (digits < n && digits < 8) {
        char c = data[digits];
        int value;
        if (c >= '0' && c <= '9')
            value = c - '0';
        else if (c >= 'a' && c <= 'f')
            value = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            value = c - 'A' + 10;
        else
            break;
        size = size * 16 + value;
        digits++;
    }
    if (digits == 0 || digits + 2 > n || data[digits] != '\r' || data[digits + 1] != '\n')
        return 0;
    Py_ssize_t first = digits + 2;
    /* the smallest event body is `data:\n\n` (7 bytes) */
    if (size < 7 || n != first + size + 2 || data[n - 2] != '\r' || data[n - 1] != '\n')
        return 0;
    const char *body = data + first;
    if (memcmp(body, "data:", 5) != 0 || body[size - 2] != '\n' || body[size - 1] != '\n')
        return 0;
    if (memchr(body + 5, '\n', (size_t)(size - 7)) != NULL || memchr(body + 5, '\r', (size_t)(size - 7)) != NULL)
        return 0;
    *start = first + (body[5] == ' ' ? 6 : 5);
    *end = first + size - 2;
    return 1;
}

static PyObject *read_event(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "read_event(fd, offset, between) takes 3 arguments");
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    if (fd < 0 || fd > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "not a file descriptor");
        return NULL;
    }
    double offset = PyFloat_AsDouble(args[1]);
    if (offset == -1.0 && PyErr_Occurred())
        return NULL;
    int between = PyObject_IsTrue(args[2]);
    if (between < 0)
        return NULL;

    char control[CMSG_SPACE(sizeof(struct timespec))];
    struct iovec iov;
    struct msghdr message;
    ssize_t n;
    for (;;) {
        iov.iov_base = buffer;
        iov.iov_len = READ_BYTES;
        memset(&message, 0, sizeof(message));
        message.msg_iov = &iov;
        message.msg_iovlen = 1;
        message.msg_control = control;
        message.msg_controllen = sizeof(control);
        n = recvmsg((int)fd, &message, MSG_DONTWAIT);
        if (n >= 0)
            break;
        if (errno != EINTR)
            return PyErr_SetFromErrno(PyExc_OSError);
        if (PyErr_CheckSignals() < 0)
            return NULL;
    }

    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double t = (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&message); c != NULL; c = CMSG_NXTHDR(&message, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == STAMP_TYPE
            && c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
            struct timespec stamp;
            memcpy(&stamp, CMSG_DATA(c), sizeof(stamp));
            double arrived = (double)stamp.tv_sec + (double)stamp.tv_nsec * 1e-9 - offset;
            if (arrived < t) /* never later than the read (a clock step since `offset`) */
                t = arrived;
            break;
        }
    }

    Py_ssize_t start, end;
    if (between && one_event(buffer, n, &start, &end)) {
        PyObject *event = PyBytes_FromStringAndSize(buffer + start, end - start);
        if (event == NULL)
            return NULL;
        return Py_BuildValue("(OdN)", Py_None, t, event);
    }
    PyObject *data = PyBytes_FromStringAndSize(buffer, n);
    if (data == NULL)
        return NULL;
    return Py_BuildValue("(NdO)", data, t, Py_None);
}

static PyMethodDef methods[] = {
    {"read_event", (PyCFunction)(void (*)(void))read_event, METH_FASTCALL,
     "read_event(fd, offset, between) -> (data, t, event): one read, its arrival time and, when it "
     "is one whole event, the event's data."},
    {NULL, NULL, 0, NULL},
};

static int exec_module(PyObject *module)
{
    if (PyModule_AddIntConstant(module, "READ_BYTES", READ_BYTES) < 0)
        return -1;
    return PyModule_AddIntConstant(module, "SCM_TIMESTAMPNS", STAMP_TYPE);
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef definition = {
    PyModuleDef_HEAD_INIT, "_fastread", "The poller's read of one stamped socket, in C.", 0, methods, slots,
    NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastread(void)
{
    return PyModuleDef_Init(&definition);
}
