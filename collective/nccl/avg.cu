// collective/nccl/avg.cu - the one GPU kernel troupe needs: TR_AVG of signed integers on
// the nccl backend. NCCL averages integers in unsigned arithmetic, so troupe sums (NCCL,
// wrapping in the dtype) and then divides here, truncating toward zero as the CPU
// backends do.
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

namespace {

template <typename T> __global__ void divide(T *p, size_t n, T by) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = (T)(p[i] / by);
}

template <typename T> cudaError_t launch(void *p, size_t n, int by, cudaStream_t st) {
    unsigned blocks = (unsigned)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024);
    if (!n) return cudaSuccess;
    divide<T><<<blocks, 256, 0, st>>>((T *)p, n, (T)by);
    return cudaGetLastError();
}

} // namespace

// dtype: 0 int8, 2 int32, 3 int64 (troupe.h's tr_dtype); 0 or a cudaError_t.
extern "C" int tr__nccl_avg_divide(void *p, size_t n, int dtype, int by, cudaStream_t st) {
    switch (dtype) {
    case 0:
        return (int)launch<int8_t>(p, n, by, st);
    case 2:
        return (int)launch<int32_t>(p, n, by, st);
    case 3:
        return (int)launch<int64_t>(p, n, by, st);
    default:
        return (int)cudaErrorInvalidValue;
    }
}
