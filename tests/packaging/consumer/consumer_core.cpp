// Uses mixprec::core from a consumer project; exits non-zero when the scaler misbehaves.
#include <mixprec/core/loss_scaler.h>

#include <cstdio>

int main() {
  mixprec::core::LossScaler scaler;
  float grad = 131072.0f;  // 2 * 65536
  const bool finite = scaler.unscale_({{&grad, 1}});
  scaler.update();
  std::printf("consumer_core: grad=%g finite=%d\n", grad, finite);
  return finite && grad == 2.0f ? 0 : 1;
}
