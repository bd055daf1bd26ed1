// mixprec: PyTorch's automatic mixed precision for LibTorch. Include this one header.
#pragma once

#include "mixprec/amp_optimizer.h"
#include "mixprec/autocast.h"
#include "mixprec/checkpoint.h"
#include "mixprec/clip.h"
#include "mixprec/functional.h"
#include "mixprec/grad_scaler.h"
#include "mixprec/grad_scaler_options.h"
#include "mixprec/optim.h"
#include "mixprec/serialize.h"
#include "mixprec/telemetry.h"
#include "mixprec/torch_version.h"

#if MIXPREC_TORCH_FP8  // LibTorch >= 2.1: float8 dtypes (fp8.h and fp4.h refuse older ones)
#include "mixprec/fp4.h"
#include "mixprec/fp8.h"
#endif

