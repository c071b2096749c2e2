/* gemm_ex's operand types as cuBLAS takes them (backend.h's be_gemm_half_type). */
#include "backend/backend.h"

dps_status be_gemm_half_type(be_dtype at, be_dtype bt, be_dtype ct, be_dtype *ht)
{
    *ht = at != BE_F32 ? at : bt;
    if (at != BE_F32 && bt != BE_F32 && at != bt)
        return dps_fail(DPS_ERR_RUNTIME, "%s:%d: gemm_ex: A and B of two half types", __FILE__, __LINE__);
    if (*ht == BE_F32 && ct != BE_F32)
        return dps_fail(DPS_ERR_RUNTIME, "%s:%d: gemm_ex: fp32 A and B with a half C is no "
                        "autocast GEMM; cast A or B to the half type first", __FILE__, __LINE__);
    if (ct != BE_F32 && ct != *ht)
        return dps_fail(DPS_ERR_RUNTIME, "%s:%d: gemm_ex: C of another half type than A and B",
                        __FILE__, __LINE__);
    return DPS_OK;
}
