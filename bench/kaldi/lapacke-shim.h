/* lapacke.h shim for building Kaldi against Debian's OpenBLAS (docs/performance.md).
 * Debian's reference lapack.h (LAPACK 3.11) declares the Fortran routines with
 * the hidden string-length arguments at the end (LAPACK_FORTRAN_STRLEN_END), so
 * Kaldi's calls in matrix/cblas-wrappers.h (written for OpenBLAS's own lapacke.h)
 * do not compile.  Here are the 14 routines Kaldi calls, with those trailing
 * lengths given default values of 1 (every character argument Kaldi passes is
 * one character), which is also the correct calling convention. */
#ifndef PYNNET3_KALDI_LAPACKE_SHIM_H
#define PYNNET3_KALDI_LAPACKE_SHIM_H
#include <stddef.h>
extern "C" {
void stptri_(const char *uplo, const char *diag, const int *n, float *ap, int *info,
             size_t l1 = 1, size_t l2 = 1);
void dtptri_(const char *uplo, const char *diag, const int *n, double *ap, int *info,
             size_t l1 = 1, size_t l2 = 1);
void sgetrf_(const int *m, const int *n, float *a, const int *lda, int *ipiv, int *info);
void dgetrf_(const int *m, const int *n, double *a, const int *lda, int *ipiv, int *info);
void sgetri_(const int *n, float *a, const int *lda, const int *ipiv, float *work,
             const int *lwork, int *info);
void dgetri_(const int *n, double *a, const int *lda, const int *ipiv, double *work,
             const int *lwork, int *info);
void sgesvd_(const char *jobu, const char *jobvt, const int *m, const int *n, float *a,
             const int *lda, float *s, float *u, const int *ldu, float *vt, const int *ldvt,
             float *work, const int *lwork, int *info, size_t l1 = 1, size_t l2 = 1);
void dgesvd_(const char *jobu, const char *jobvt, const int *m, const int *n, double *a,
             const int *lda, double *s, double *u, const int *ldu, double *vt,
             const int *ldvt, double *work, const int *lwork, int *info,
             size_t l1 = 1, size_t l2 = 1);
void ssptri_(const char *uplo, const int *n, float *ap, const int *ipiv, float *work,
             int *info, size_t l1 = 1);
void dsptri_(const char *uplo, const int *n, double *ap, const int *ipiv, double *work,
             int *info, size_t l1 = 1);
void ssptrf_(const char *uplo, const int *n, float *ap, int *ipiv, int *info, size_t l1 = 1);
void dsptrf_(const char *uplo, const int *n, double *ap, int *ipiv, int *info, size_t l1 = 1);
}
#endif
