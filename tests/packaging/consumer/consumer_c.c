/* Uses mixprec::c (the C ABI, libmixprec_c.so) from a consumer project, as C. */
#include <mixprec/c_api.h>
#include <stdio.h>

int main(void) {
  mixprec_grad_scaler_options options;
  mixprec_grad_scaler* scaler = NULL;
  double scale = 0.0;
  mixprec_grad_scaler_options_default(&options);
  mixprec_grad_scaler_options_set_init_scale(&options, 8.0);
  if (mixprec_abi_version() != MIXPREC_C_ABI_VERSION ||
      mixprec_grad_scaler_create(&options, &scaler) != MIXPREC_OK ||
      mixprec_grad_scaler_get_scale(scaler, &scale) != MIXPREC_OK || scale != 8.0) {
    fprintf(stderr, "consumer_c: %s\n", mixprec_last_error());
    return 1;
  }
  mixprec_grad_scaler_destroy(scaler);
  printf("consumer_c: mixprec %s, C ABI %d, scale %g\n", mixprec_version(), mixprec_abi_version(),
         scale);
  return 0;
}
