// cudashim.h: included first by each kernels/cuda/*.cu compiled as C++ against the CUDA stand-in
// (tests/cudashim/CMakeLists.txt). The stand-in always has cuDNN (cudnn.cc), whatever this build
// found, so conv_cudnn.cu's cuDNN path is what runs under it.
#ifndef DP_CUDASHIM_H
#define DP_CUDASHIM_H

#include "dp_config.h"
#undef DP_HAVE_CUDNN
#define DP_HAVE_CUDNN 1

#include "cuda_runtime.h"

#endif
