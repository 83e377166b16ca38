#include <stdio.h>
#include <cpuid.h>
int main(){unsigned a,b,c,d; __cpuid_count(7,0,a,b,c,d); printf("sha=%d avx2=%d\n",(b>>29)&1,(b>>5)&1); return 0;}
