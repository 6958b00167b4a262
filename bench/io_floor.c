/* io_floor: the machine's floor for reading token streams -- a C client that does nothing but the I/O.

   N streams (keep-alive connections) to an OpenAI-compatible engine, each sending R streamed chat
   requests back to back (stream i starts at i * ramp_s / N), all read from one epoll: per readiness
   one non-blocking recvmsg() with the kernel's receive stamp (SO_TIMESTAMPNS), as grill's poller
   reads (grill_locust/client/_fastread.c), and no parsing beyond finding each response's last chunk.
   Its CPU per output event is what the kernel and the machine charge for that I/O pattern; what
   grill or any client costs above it is the client's own. `bench/capacity.py` builds and runs it
   beside grill and the baselines, against the same simulated engine, measured the same way.

       cc -O2 -o io_floor bench/io_floor.c
       ./io_floor PORT MODEL STREAMS REQUESTS MAX_TOKENS RAMP_S

   Prints one line of totals; exits 1 if a response is not a chunked 200 or the run outlasts 600 s. */

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define READ_BYTES 65536
#define RUN_LIMIT_S 600.0
#define END_CHUNK "0\r\n\r\n"

struct stream {
    int fd;
    int requests_left;
    int started;
    char tail[5]; /* the last bytes read: the end chunk may span two reads */
    int tail_len;
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_port = htons((unsigned short)port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof(address)) != 0) {
        perror("io_floor: connect");
        exit(1);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
    return fd;
}

static void send_request(struct stream *s, int number, const char *model, int max_tokens)
{
    /* a distinct first word per request, so that no prefix cache serves one from another */
    char body[2048], request[4096];
    int used = snprintf(body, sizeof(body),
                        "{\"model\":\"%s\",\"stream\":true,\"max_tokens\":%d,\"ignore_eos\":true,"
                        "\"messages\":[{\"role\":\"user\",\"content\":\"request %d:",
                        model, max_tokens, number);
    for (int word = 0; word < 96 && used < (int)sizeof(body) - 64; word++)
        used += snprintf(body + used, sizeof(body) - (size_t)used, " w%d", word);
    used += snprintf(body + used, sizeof(body) - (size_t)used, "\"}]}");
    int length = snprintf(request, sizeof(request),
                          "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                          used, body);
    if (send(s->fd, request, (size_t)length, 0) != length) {
        perror("io_floor: send");
        exit(1);
    }
    s->requests_left--;
    s->tail_len = 0;
}

/* Whether the response on `s` ended with this read (its last chunk, possibly split across reads). */
static int ended(struct stream *s, const char *data, ssize_t n)
{
    char joined[10];
    int kept = s->tail_len;
    int take = n < 5 ? (int)n : 5;
    memcpy(joined, s->tail, (size_t)kept);
    memcpy(joined + kept, data + n - take, (size_t)take);
    int length = kept + take;
    int keep = length < 5 ? length : 5;
    memmove(s->tail, joined + length - keep, (size_t)keep);
    s->tail_len = keep;
    return length >= 5 && memcmp(joined + length - 5, END_CHUNK, 5) == 0;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: io_floor PORT MODEL STREAMS REQUESTS MAX_TOKENS RAMP_S\n");
        return 2;
    }
    int port = atoi(argv[1]), streams = atoi(argv[3]), requests = atoi(argv[4]), max_tokens = atoi(argv[5]);
    const char *model = argv[2];
    double ramp_s = atof(argv[6]);
    int epoll_fd = epoll_create1(0);
    struct stream *all = calloc((size_t)streams, sizeof(struct stream));
    struct epoll_event *ready = calloc((size_t)streams, sizeof(struct epoll_event));
    static char buffer[READ_BYTES];
    char control[CMSG_SPACE(sizeof(struct timespec))];
    long reads = 0, wakeups = 0, responses = 0, sent = 0;
    int started = 0, open = 0;
    double start = now_s();
    while (started < streams || open > 0) {
        double elapsed = now_s() - start;
        if (elapsed > RUN_LIMIT_S) {
            fprintf(stderr, "io_floor: still %d streams open after %.0f s\n", open, RUN_LIMIT_S);
            return 1;
        }
        while (started < streams && (streams == 1 || elapsed >= ramp_s * started / streams)) {
            struct stream *s = &all[started];
            s->fd = connect_to(port);
            s->requests_left = requests;
            struct epoll_event watch = {.events = EPOLLIN, .data.u32 = (unsigned)started};
            epoll_ctl(epoll_fd, EPOLL_CTL_ADD, s->fd, &watch);
            send_request(s, (int)sent++, model, max_tokens);
            started++;
            open++;
        }
        int timeout_ms = started < streams ? 1 : 1000;
        int count = epoll_wait(epoll_fd, ready, streams, timeout_ms);
        wakeups++;
        for (int i = 0; i < count; i++) {
            struct stream *s = &all[ready[i].data.u32];
            struct iovec piece = {buffer, READ_BYTES};
            struct msghdr message = {0};
            message.msg_iov = &piece;
            message.msg_iovlen = 1;
            message.msg_control = control;
            message.msg_controllen = sizeof(control);
            ssize_t n = recvmsg(s->fd, &message, MSG_DONTWAIT);
            if (n <= 0) {
                if (n == 0) {
                    fprintf(stderr, "io_floor: the engine closed a stream\n");
                    return 1;
                }
                continue;
            }
            reads++;
            if (s->tail_len == 0 && memcmp(buffer, "HTTP/1.1 200", n < 12 ? (size_t)n : 12) != 0) {
                fprintf(stderr, "io_floor: not a 200 response: %.60s\n", buffer);
                return 1;
            }
            if (ended(s, buffer, n)) {
                responses++;
                if (s->requests_left > 0) {
                    send_request(s, (int)sent++, model, max_tokens);
                } else {
                    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, s->fd, NULL);
                    close(s->fd);
                    open--;
                }
            }
        }
    }
    printf("io_floor: %d streams, %ld responses, %ld reads in %ld wake-ups, %.1f s\n", streams, responses,
           reads, wakeups, now_s() - start);
    return 0;
}
