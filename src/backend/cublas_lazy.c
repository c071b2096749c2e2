/* cuBLAS and cuBLASLt opened on the first call of one of their functions
 * (dlopen), not when dpscale starts: their libraries' initialisation takes
 * half a second of CPU at every start, which a process on the host backend,
 * `dpscale info` or `--help` never needs. Each function dpscale calls is
 * defined here with the header's prototype and forwards to the library's.
 * Only built when the toolkit is. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <cublas_api.h>
#include <cublasLt.h>

#include "build_config.h"

#define STR_(x) #x
#define STR(x) STR_(x)
#define CUBLAS_SONAME "libcublas.so." STR(CUBLAS_VER_MAJOR)
#define CUBLASLT_SONAME "libcublasLt.so." STR(CUBLAS_VER_MAJOR)

static void *cublas_lib;
static void *cublaslt_lib;
static char open_error[512];
static pthread_once_t opened = PTHREAD_ONCE_INIT;

/* SONAME by the loader's search (LD_LIBRARY_PATH, the binary's run path),
 * else in the toolkit the build was configured with. */
static void *open_library(const char *soname)
{
    void *lib = dlopen(soname, RTLD_NOW | RTLD_GLOBAL);
    if (lib) return lib;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", DPS_CUDA_LIBDIR, soname);
    lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!lib && !open_error[0]) {
        const char *why = dlerror();
        snprintf(open_error, sizeof open_error, "%s", why ? why : soname);
    }
    return lib;
}

static void open_libraries(void)
{
    cublaslt_lib = open_library(CUBLASLT_SONAME);
    cublas_lib = open_library(CUBLAS_SONAME);
}

/* The function NAME of cuBLAS (or cuBLASLt: LT), or NULL, said once on stderr. */
static void *lazy_symbol(int lt, const char *name)
{
    pthread_once(&opened, open_libraries);
    void *lib = lt ? cublaslt_lib : cublas_lib;
    void *fn = lib ? dlsym(lib, name) : NULL;
    if (!fn) {
        fprintf(stderr, "dpscale: cannot call %s: %s; the CUDA backend needs cuBLAS %d "
                "(%s and %s, in %s or on LD_LIBRARY_PATH)\n", name,
                lib ? "the library lacks it" : open_error, CUBLAS_VER_MAJOR, CUBLAS_SONAME,
                CUBLASLT_SONAME, DPS_CUDA_LIBDIR);
    }
    return fn;
}

/* RET NAME(PARAMS) forwarding ARGS to the library's NAME; FAILED when it cannot be found. */
#define FORWARD(lt, ret, failed, name, params, args)                         \
    ret CUBLASWINAPI name params                                             \
    {                                                                        \
        typedef ret (*fn_t) params;                                          \
        static fn_t fn;                                                      \
        if (!fn) *(void **)&fn = lazy_symbol(lt, #name);                    \
        return fn ? fn args : failed;                                        \
    }
#define CUBLAS(name, params, args) \
    FORWARD(0, cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, name, params, args)
#define CUBLASLT(name, params, args) \
    FORWARD(1, cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, name, params, args)

CUBLAS(cublasCreate_v2, (cublasHandle_t *handle), (handle))
CUBLAS(cublasDestroy_v2, (cublasHandle_t handle), (handle))
CUBLAS(cublasGetProperty, (libraryPropertyType type, int *value), (type, value))
CUBLAS(cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream), (handle, stream))
CUBLAS(cublasSetWorkspace_v2, (cublasHandle_t handle, void *workspace, size_t bytes),
       (handle, workspace, bytes))
CUBLAS(cublasSgemm_v2,
       (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
        int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
        const float *beta, float *C, int ldc),
       (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))
CUBLAS(cublasGemmEx,
       (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
        int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
        cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
        cublasComputeType_t computeType, cublasGemmAlgo_t algo),
       (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype,
        ldc, computeType, algo))
FORWARD(0, const char *, "cuBLAS not loaded", cublasGetStatusName, (cublasStatus_t status),
        (status))
FORWARD(0, const char *, "cuBLAS not loaded", cublasGetStatusString, (cublasStatus_t status),
        (status))

CUBLASLT(cublasLtMatmulDescCreate,
         (cublasLtMatmulDesc_t *desc, cublasComputeType_t compute, cudaDataType_t scale),
         (desc, compute, scale))
CUBLASLT(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))
CUBLASLT(cublasLtMatmulDescSetAttribute,
         (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void *buf,
          size_t bytes),
         (desc, attr, buf, bytes))
CUBLASLT(cublasLtMatrixLayoutCreate,
         (cublasLtMatrixLayout_t *layout, cudaDataType type, uint64_t rows, uint64_t cols,
          int64_t ld),
         (layout, type, rows, cols, ld))
CUBLASLT(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))
CUBLASLT(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t *pref), (pref))
CUBLASLT(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
CUBLASLT(cublasLtMatmulPreferenceSetAttribute,
         (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
          const void *buf, size_t bytes),
         (pref, attr, buf, bytes))
CUBLASLT(cublasLtMatmulAlgoGetHeuristic,
         (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
          cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
          cublasLtMatmulPreference_t pref, int requested,
          cublasLtMatmulHeuristicResult_t results[], int *returned),
         (handle, desc, a, b, c, d, pref, requested, results, returned))
CUBLASLT(cublasLtMatmul,
         (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
          cublasLtMatrixLayout_t adesc, const void *B, cublasLtMatrixLayout_t bdesc,
          const void *beta, const void *C, cublasLtMatrixLayout_t cdesc, void *D,
          cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
          size_t workspace_bytes, cudaStream_t stream),
         (handle, desc, alpha, A, adesc, B, bdesc, beta, C, cdesc, D, ddesc, algo, workspace,
          workspace_bytes, stream))
