// The CPU "reference" kernel set (internal): plain loops, double accumulation and double element math,
// unfused — each function is the textbook formula of the op it implements (sources in
// twinkle/kernels/ops.h and the cpu/*.h headers), written for obviousness, not speed. Fused ops are
// compositions of the unfused reference functions. Registered by register_reference_kernels.
#pragma once
#include <cstdint>

#include "twinkle/kernels/op_functions.h"

namespace twinkle::kernels::cpu::reference {

// Every op's entry points (twinkle/kernels/op_functions.h).
#define TWINKLE_DECLARE_OP_FUNCTION(ret, name, params) ret name params;
TWINKLE_KERNEL_OP_FUNCTIONS(TWINKLE_DECLARE_OP_FUNCTION)
#undef TWINKLE_DECLARE_OP_FUNCTION

}  // namespace twinkle::kernels::cpu::reference
