/* Preloaded into the sanitizer suite's processes (tests/CMakeLists.txt): the
 * shared objects Open MPI loads stay mapped at exit, so LeakSanitizer can name
 * the library behind each allocation and tests/lsan.supp can match MPI's own
 * by library name. Only dlclose changes: nothing is ever unloaded. */
int dlclose(void *handle);

int dlclose(void *handle) {
  (void)handle;
  return 0;
}
