// The unit that carries LibTorch's precompiled header (cmake/StrataBuildSpeed.cmake); it
// defines nothing.
