// The fused LibTorch optimizers of mixprec: drop-in replacements for torch::optim::SGD, Adam and
// AdamW whose step is one pass over memory and which GradScaler drives without host syncs.
#pragma once

#include "mixprec/optim/adam.h"
#include "mixprec/optim/adamw.h"
#include "mixprec/optim/sgd.h"
