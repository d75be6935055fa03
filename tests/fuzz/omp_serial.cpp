// The fuzz tree is built without OpenMP (TOKENFLOW_OPENMP=OFF: one thread, no runtime to link),
// but the library still calls the OpenMP query functions (the training and attention code size
// their per-thread buffers with them). These serial answers stand in for the runtime; they are weak,
// so a build that links OpenMP uses the real ones.
extern "C" {
__attribute__((weak)) int omp_get_max_threads() { return 1; }
__attribute__((weak)) int omp_get_thread_num() { return 0; }
__attribute__((weak)) void omp_set_num_threads(int) {}
}
