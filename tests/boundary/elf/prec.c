/* libprec.so, built several times: BD_PREC_BAD makes the build that needs
 * the (fake) driver, which linkcheck must find whichever folder ld.so would
 * take it from on some CPU. */
#define BD_API __attribute__((visibility("default")))

BD_API int bd_prec(void);

#ifdef BD_PREC_BAD
int bd_family_marker(void);

int bd_prec(void)
{
    return bd_family_marker();
}
#else
int bd_prec(void)
{
    return 1;
}
#endif
