// The translation unit of target mixprec_torch_pch (cmake/MixprecHelpers.cmake): it exists so
// that the precompiled <torch/torch.h> it builds can be reused by the programs of the build.
