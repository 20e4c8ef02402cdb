"""A spec to a raw wheel and a log: toolchain images, the executors that run builds in them or on the host,
emulation, the HIP compile."""
