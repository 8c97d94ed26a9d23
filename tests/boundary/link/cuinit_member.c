/* An archive member (libinnocent.a) that defines a driver entry point; a
 * program that links it and is stripped shows no symbol for linkcheck. */
int cuInit(unsigned int flags);
int bd_storage_init(void);

int cuInit(unsigned int flags)
{
    return (int)(flags & 3u);
}

int bd_storage_init(void)
{
    return cuInit(0);
}
