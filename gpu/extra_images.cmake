# Extra cubins from a directory (lease-agent --cubin-dir): pure C over the
# cubin checker, no driver calls.
target_sources(ga_core PRIVATE extra_images.c)
