// For tests/python/unpickle_interop.py: each file named on the command line loaded with
// mixprec::pickle_load, one line each, "<file>\t<value>" (tests/value_dump.h) or
// "<file>\tERROR <message's first line>".
#include <mixprec/mixprec.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "value_dump.h"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    std::cout << argv[i] << "\t";
    try {
      std::cout << mixprec::test::ValueDump()(mixprec::pickle_load(bytes)) << "\n";
    } catch (const c10::Error& e) {
      const std::string what = e.what_without_backtrace();
      std::cout << "ERROR " << what.substr(0, what.find('\n')) << "\n";
    }
  }
  return 0;
}
