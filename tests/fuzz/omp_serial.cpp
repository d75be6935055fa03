// A fuzz tree built without OpenMP (TOKENFLOW_OPENMP=OFF: one thread, no runtime to link) still
// calls the OpenMP query functions from the library (the training and attention code size their
// per-thread buffers with them). These serial answers stand in for the runtime; the file is linked
// only into such trees (tests/fuzz/CMakeLists.txt), never next to a real OpenMP runtime.
extern "C" {
__attribute__((weak)) int omp_get_max_threads() { return 1; }
__attribute__((weak)) int omp_get_thread_num() { return 0; }
__attribute__((weak)) void omp_set_num_threads(int) {}
}
