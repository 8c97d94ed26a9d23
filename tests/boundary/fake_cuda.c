/* A library that only pretends to be the CUDA driver: built as
 * libcuda.so.1 so the run-time self check has something to catch. */
int fake_driver_marker(void);
int fake_driver_marker(void)
{
    return 580;
}
