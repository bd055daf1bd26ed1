// Uses mixprec/distributed.h from a consumer project: it compiles and links only where mixprec was
// built with its distributed code (elsewhere the header stops the compile with its #error).
#include <mixprec/distributed.h>

#include <iostream>
#include <string>

int main() {
  try {  // no process group is needed to reach mixprec's code: an empty list is refused
    mixprec::distributed::found_inf_reducer(std::vector<mixprec::distributed::ProcessGroupPtr>{});
  } catch (const c10::Error& e) {
    const bool ours = std::string(e.what()).find("needs at least one process group") !=
                      std::string::npos;
    std::cout << "consumer_distributed: " << (ours ? "mixprec's error, as expected" : e.what())
              << "\n";
    return ours ? 0 : 1;
  }
  return 1;
}
