"""llama.cpp's own server for the calibration tests: the real-engine tests' fixtures (one way to find,
start and gate it)."""

from tests.real import conftest as real_engines

llama_paths = real_engines.llama_paths
llama_server = real_engines.llama_server
