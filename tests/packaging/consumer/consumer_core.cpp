// Uses mixprec::core from a consumer project; exits non-zero when the scaler misbehaves. Built
// twice: with the compiler's default libstdc++ ABI and with the other one (consumer_core_other_abi),
// since mixprec::core's API must not depend on it (a core::Error crosses from the library here).
#include <mixprec/core/error.h>
#include <mixprec/core/loss_scaler.h>

#include <cstdio>
#include <string>

int main() {
  mixprec::core::LossScaler scaler;
  float grad = 131072.0f;  // 2 * 65536
  const bool finite = scaler.unscale_({{&grad, 1}});
  scaler.update();
  std::string message;
  try {
    scaler.update();  // no unscale_() since the last update(): the library throws
  } catch (const std::exception& e) {
    message = e.what();
  }
  std::printf("consumer_core (_GLIBCXX_USE_CXX11_ABI=%d): grad=%g finite=%d error=\"%s\"\n",
              _GLIBCXX_USE_CXX11_ABI, grad, finite, message.c_str());
  return finite && grad == 2.0f && !message.empty() ? 0 : 1;
}
