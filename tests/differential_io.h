// The files the differential programs exchange with their Python drivers (tests/gpu/differential.*
// on a GPU, tests/python/differential_cpu.* on the CPU): meta.txt ("key value..." lines) and raw
// float32 little-endian tensors.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace mixprec::differential {

/// meta.txt: each line is a key followed by whitespace-separated values; '#' starts a comment.
using Meta = std::map<std::string, std::vector<std::string>>;

inline Meta read_meta(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  Meta meta;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key, value;
    if (!(words >> key) || key[0] == '#') continue;
    auto& values = meta[key];
    while (words >> value) values.push_back(value);
  }
  return meta;
}

/// The values of `key` (possibly none); throws when the key is missing.
inline std::vector<std::string> meta_list(const Meta& meta, const std::string& key) {
  const auto it = meta.find(key);
  if (it == meta.end()) throw std::runtime_error("meta.txt: key '" + key + "' missing");
  return it->second;
}
/// The one value of `key`; throws when it is missing or not exactly one value.
inline std::string meta_value(const Meta& meta, const std::string& key) {
  const std::vector<std::string> values = meta_list(meta, key);
  if (values.size() != 1) throw std::runtime_error("meta.txt: key '" + key + "' not one value");
  return values[0];
}
inline std::int64_t meta_int(const Meta& meta, const std::string& key) {
  return std::stoll(meta_value(meta, key));
}
inline double meta_double(const Meta& meta, const std::string& key) {
  return std::stod(meta_value(meta, key));
}

/// A float32 little-endian file of exactly numel(shape) values, as a CPU tensor of `shape`.
inline torch::Tensor read_floats(const std::string& path, const std::vector<std::int64_t>& shape) {
  std::int64_t numel = 1;
  for (std::int64_t s : shape) numel *= s;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("cannot open " + path);
  const std::streamoff bytes = in.tellg();
  if (bytes != numel * 4) {
    throw std::runtime_error(path + ": " + std::to_string(bytes) + " bytes, expected " +
                             std::to_string(numel * 4));
  }
  static_assert(sizeof(float) == 4, "float32 expected");
  torch::Tensor t = torch::empty(shape, torch::kFloat);  // x86-64 and aarch64 are little-endian
  in.seekg(0);
  in.read(reinterpret_cast<char*>(t.data_ptr<float>()), bytes);
  return t;
}

/// The tensors, one after the other, as float32 little-endian (copied to the CPU first).
inline void write_floats(const std::string& path, const std::vector<torch::Tensor>& tensors) {
  std::ofstream out(path, std::ios::binary);
  for (const torch::Tensor& t : tensors) {
    const torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat).contiguous();
    out.write(reinterpret_cast<const char*>(c.data_ptr<float>()),
              static_cast<std::streamsize>(c.numel() * 4));
  }
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace mixprec::differential
