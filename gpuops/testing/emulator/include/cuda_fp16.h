// Stand-in for CUDA's <cuda_fp16.h> under the emulator: __half and its conversions are defined in
// cuda_emu.h (which the launcher includes first), so kernels keep their `#include <cuda_fp16.h>`.
#pragma once
#include "../cuda_emu.h"
