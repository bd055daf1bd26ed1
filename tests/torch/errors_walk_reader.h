// The errors walk's triggers of mixprec's reader of untrusted files (docs/errors.md, the rows of
// src/torch/checkpoint/: zip_archive, pickle_reader, unpickle): one crafted file per message.
// Included by errors_walk_test.cpp only.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "torch/crafted_files.h"
#include "torch/errors_walk_triggers.h"

namespace mixprec::errors_walk {

namespace reader {

using test::Pickle;
using test::raw;

inline Action file(std::vector<char> bytes) {
  return thrown([bytes = std::move(bytes)] { pickle_load(bytes); });
}
// A protocol-2 pickle of `ops` then STOP, alone in an archive.
inline Action ops(const std::string& ops) {
  Pickle p;
  return file(test::archive(p.op(ops).stop()));
}
// A whole pickle, as it is, in an archive.
inline Action whole(const std::string& pickle) { return file(test::archive(pickle)); }

// Four floats on storage "0" (`count` stated), and its record.
inline std::vector<char> tensor_file(std::int64_t count = 4, std::string record = std::string(16, 'x')) {
  Pickle p;
  p.tensor("FloatStorage", "0", count, 0, {4}, {1});
  return test::archive(p.stop(), {{"data/0", record}});
}
// tensor_file() changed by `patch` (a zip field, as an attacker would change it).
template <typename Patch>
inline Action zip(Patch patch) {
  std::vector<char> z = tensor_file();
  patch(z);
  return file(z);
}
// _rebuild_tensor_v2 with `args` (opcodes between its MARK and TUPLE).
inline Action rebuild(const std::string& name, const std::string& args) {
  Pickle p;
  p.global("torch._utils", name).mark().op(args).op('t').op('R');
  return file(test::archive(p.stop(), {{"data/0", std::string(16, 'x')}}));
}
// The opcodes of a storage persistent id and a tensor's first arguments.
inline std::string storage(const std::string& cls = "FloatStorage", std::int64_t count = 4) {
  Pickle p;
  p.storage(cls, "0", count);
  return p.body();
}
inline std::string ints(const std::vector<std::int64_t>& values) {
  Pickle p;
  p.mark();
  for (const std::int64_t v : values) p.integer(v);
  return p.op('t').body();
}
inline std::string hooks() { return raw("\x89" "ccollections\nOrderedDict\n)R"); }
// storage, offset, sizes, strides, requires_grad False, hooks.
inline std::string args(const std::vector<std::int64_t>& sizes, const std::vector<std::int64_t>& strides,
                        std::int64_t offset = 0, const std::string& cls = "FloatStorage",
                        std::int64_t count = 4) {
  Pickle p;
  return storage(cls, count) + p.integer(offset).body() + ints(sizes) + ints(strides) + hooks();
}

}  // namespace reader

inline std::vector<Trigger> reader_triggers() {
  using namespace reader;  // NOLINT(build/namespaces)
  const std::vector<char> good = tensor_file();
  const test::ZipEntry e = test::find_entry(good, "data/0");
  const std::size_t end = good.size() - 22;
  return {
      {"ReaderZip",
       "`mixprec: ... is not a zip archive as torch.save writes",
       {file(std::vector<char>(good.begin(), good.end() - 1)),
        zip([&](auto& z) { test::write_le(z, e.central + 10, 2, 8); test::write_le(z, e.central + 24, 4, 1u << 30); }),
        file([] {
          std::vector<char> z = test::archive(Pickle().small(1).stop(), {{"data.pkx", "x"}});
          test::rename_entry(z, "data.pkx", "data.pkl");
          return z;
        }()),
        zip([&](auto& z) { test::write_le(z, e.central + 20, 4, 1u << 20); test::write_le(z, e.central + 24, 4, 1u << 20); }),
        zip([&](auto& z) {
          test::write_le(z, e.central + 42, 4, test::read_le(z, test::find_entry(z, "data.pkl").central + 42, 4));
        }),
        zip([&](auto& z) {  // LibTorch's writer always adds zip64's end records
          const std::size_t z64 = test::read_le(z, end - 20 + 8, 4);
          test::write_le(z, end + 8, 2, 0xffff);
          test::write_le(z, end + 10, 2, 0xffff);
          test::write_le(z, z64 + 24, 4, 1000000);
          test::write_le(z, z64 + 32, 4, 1000000);
        })}},
      {"ReaderCrc", "`record \"...\" does not match its CRC-32", {zip([&](auto& z) {
         const std::size_t data = e.local + 30 + test::read_le(z, e.local + 26, 2) + test::read_le(z, e.local + 28, 2);
         z[data] ^= 1;
       })}},
      {"ReaderRecords",
       "`mixprec: cannot open ...: open() failed",
       {thrown([] {
          torch::nn::Linear model(1, 1);
          torch::optim::SGD opt(model->parameters(), 0.1);
          GradScaler scaler;
          load_checkpoint("/nonexistent-mixprec-folder/c.pt", *model, opt, scaler);
        }),
        thrown([] {
          torch::nn::Linear model(1, 1);
          torch::optim::SGD opt(model->parameters(), 0.1);
          GradScaler scaler;
          load_checkpoint("/dev/null", *model, opt, scaler);
        }),
        zip([](auto& z) {  // every version record (LibTorch 2.x also writes .data/version)
          while (true) {
            try {
              test::rename_entry(z, "version", "versioX");
            } catch (const std::runtime_error&) {
              break;
            }
          }
        }),
        zip([](auto& z) {
          for (const std::string name : {"/version", ".data/version"}) {
            try {
              const test::ZipEntry v = test::find_entry(z, name);
              z[v.local + 30 + test::read_le(z, v.local + 26, 2) + test::read_le(z, v.local + 28, 2)] = 'x';
              test::write_le(z, v.central + 16, 4, 0);  // no CRC to check
            } catch (const std::runtime_error&) {
            }
          }
        }),
        file(test::archive(Pickle().small(1).stop(), {{"byteorder", "middle"}})),
        zip([](auto& z) { test::rename_entry(z, "data.pkl", "data.pkx"); }),
        file(test::archive(Pickle().tensor("FloatStorage", "0", 4, 0, {4}, {1}).stop())),
        file(tensor_file(4, std::string(18, 'x')))}},
      {"ReaderOpcodes",
       "`data.pkl, byte N: pickle opcode ... (N) is not one torch.save writes",
       {ops(raw("ccollections\nOrderedDict\n)\x81")), whole(raw("\x80\x01K\x01.")),
        whole(raw("\x80\x02K\x01")), ops(raw("X\x05\x00\x00\x00" "ab")), file(test::archive(Pickle().small(1).stop() + "x")),
        ops(raw("K\x01K\x02")), ops("c" + std::string(300, 'a') + "\nb\n")}},
      {"ReaderGlobals",
       "`the global \"...\" is refused: it is not one a state dict needs",
       {ops(raw("cos\nsystem\n")), ops(raw("ctorch._utils\n_rebuild_sparse_tensor\n")),
        ops(raw("ctorch._utils\n_rebuild_qtensor\n")), ops(raw("ctorch._utils\n_rebuild_nested_tensor\n")),
        ops(raw("ctorch._utils\n_rebuild_meta_tensor_no_storage\n")),
        ops(raw("ctorch._tensor\n_rebuild_from_type_v2\n")),
        ops(raw("ctorch._utils\n_rebuild_device_tensor_from_numpy\n")),
        ops(raw("ccollections\nOrderedDict\n")), ops(raw("ctorch\nfloat32\n)R")), ops(raw("N)R")),
        ops(raw("K\x01K\x02\x93"))}},
      {"ReaderStack",
       "`REDUCE on an empty stack`",
       {ops("R"), ops("e"), ops(raw("K\x01(K\x02\x86")), ops(raw("](K\x01" "a")), ops(raw("}K\x01" "a")),
        ops(raw("}(K\x01u")), ops(raw("}(K\x01s")), ops(raw("](a")), ops(raw("K\x01r\xff\xff\xff\xff")),
        ops(raw("K\x01q\x00h\x01"))}},
      {"ReaderValues",
       "`a str that is not UTF-8`",
       {ops(raw("X\x01\x00\x00\x00\xff")), ops(raw("\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01")),
        ops(raw("ccollections\nOrderedDict\nK\x01R")), ops(raw("]K\x01" "b")),
        ops(raw("ccollections\nOrderedDict\n)RK\x01" "b")), ops(raw("ccollections\nOrderedDict\nK\x01\x85R")),
        ops(raw("ctorch.jit._pickle\nrestore_type_tag\n]K\x01\x86R")),
        ops(raw("ctorch.jit._pickle\nbuild_intlist\nK\x01\x85R")),
        ops(raw("ctorch.jit._pickle\nbuild_doublelist\nctorch.jit._pickle\nbuild_intlist\n]\x85R\x85R")),
        ops(raw("ctorch.jit._pickle\nbuild_intlist\n]X\x01\x00\x00\x00" "aa\x85R"))}},
      {"ReaderStorages",
       "`BINPERSID of a ...; torch.save's are ('storage', class, key, location, count)`",
       {ops(raw("K\x01Q")), ops(raw("(X\x01\x00\x00\x00" "aK\x01K\x01K\x01K\x01tQ")),
        ops(raw("(X\x07\x00\x00\x00" "storageK\x01K\x01K\x01K\x01tQ")),
        ops(raw("(X\x07\x00\x00\x00" "storagectorch\nFloatStorage\nK\x01K\x01K\x01tQ")),
        file(tensor_file(-1, "")),
        file(test::archive(Pickle().mark().tensor("FloatStorage", "0", 4, 0, {4}, {1})
                               .tensor("IntStorage", "0", 4, 0, {4}, {1}).op('t').stop(),
                           {{"data/0", std::string(16, 'x')}}))}},
      {"ReaderTensors",
       "`_rebuild_tensor_v2 takes N or one more arguments, got N`",
       {rebuild("_rebuild_tensor_v2", raw("K\x01K\x02")),
        rebuild("_rebuild_tensor_v2", raw("K\x01K\x01K\x01K\x01K\x01K\x01")),
        rebuild("_rebuild_tensor_v2", storage() + raw("NNNNN")),
        rebuild("_rebuild_tensor_v2", storage() + raw("K\x00") + ints({4}) + ints({1}) + raw("K\x01") + hooks().substr(1)),
        rebuild("_rebuild_tensor_v3", args({4}, {1}) + raw("K\x01")),
        rebuild("_rebuild_tensor_v3", args({4}, {1}, 0, "IntStorage") + raw("ctorch\nfloat32\n")),
        rebuild("_rebuild_parameter", raw("K\x01K\x01")),
        rebuild("_rebuild_parameter", raw("K\x01K\x01K\x01")),
        rebuild("_rebuild_tensor_v2", storage() + raw("K\x00K\x04K\x01") + hooks()),
        rebuild("_rebuild_tensor_v2", storage() + raw("K\x00N\x85K\x01\x85") + hooks()),
        rebuild("_rebuild_tensor_v2", args({4}, {1, 1})),
        rebuild("_rebuild_tensor_v2", args(std::vector<std::int64_t>(65, 1), std::vector<std::int64_t>(65, 1))),
        rebuild("_rebuild_tensor_v2", args({4}, {1}, -1)),
        rebuild("_rebuild_tensor_v2", args({4}, {-1})),
        rebuild("_rebuild_tensor_v2", args({std::int64_t{1} << 40, std::int64_t{1} << 40}, {0, 0})),
        rebuild("_rebuild_tensor_v2", args({5}, {1})),
        rebuild("_rebuild_tensor_v2", storage() + raw("K\x00") + ints({4}) + ints({1}) + raw("\x89K\x01")),
        rebuild("_rebuild_tensor_v2", storage() + raw("K\x00") + ints({4}) + ints({1}) +
                                          raw("\x89" "ccollections\nOrderedDict\n)Rq\x00h\x00K\x01K\x01s")),
        rebuild("_rebuild_tensor_v2", storage("LongStorage", 2) + raw("K\x00") + ints({2}) + ints({1}) + raw("\x88") +
                                          hooks().substr(1))}},
      {"ReaderLimits",
       "`containers nested more than N deep`",
       {ops(")" + std::string(2000, '\x85')), ops(raw("]q\x00h\x00" "a")),
        ops([] {
          std::string s = raw("K\x00");
          for (int i = 0; i < 40; ++i) s += std::string("q\x00h\x00\x86", 5);
          return s;
        }()),
        ops(raw("}NK\x01s")),
        ops([] {
          constexpr std::uint64_t kInverse = 0xf1de83e19937733dull;  // Fibonacci's multiplier^-1
          Pickle p;
          p.mark();
          for (std::uint64_t i = 0; i < 64; ++i) {
            p.integer(static_cast<std::int64_t>((0x5555555555555555ull + i) * kInverse)).small(0);
          }
          return raw("}") + p.op('u').body();
        }())}},
      {"ReaderDtype",
       "`has a tensor of dtype float8_e4m3fn, which this LibTorch (...) does not have`",
       {rebuild("_rebuild_tensor_v3", args({16}, {1}, 0, "UntypedStorage", 16) + raw("ctorch\nfloat8_e4m3fn\n"))},
       [] {
         if (!MIXPREC_TORCH_AT_LEAST(2, 1)) return std::string();
         Pickle p;  // the same file loads where LibTorch has the dtype
         p.global("torch._utils", "_rebuild_tensor_v3").mark().op(reader::args({16}, {1}, 0, "UntypedStorage", 16));
         p.global("torch", "float8_e4m3fn").op('t').op('R');
         EXPECT_EQ(pickle_load(test::archive(p.stop(), {{"data/0", std::string(16, 'x')}})).toTensor().numel(), 16);
         return std::string("LibTorch >= 2.1 has float8_e4m3fn: the file loads");
       }},
      {"ReaderScalerRules",
       "`GradScaler.load_state_dict: growth_factor must be > 1.0",
       {thrown([] {
          GradScaler s;
          auto sd = s.state_dict();
          sd.insert_or_assign("growth_factor", 0.5);
          s.load_state_dict(sd);
        }),
        thrown([] {
          GradScaler s;
          auto sd = s.state_dict();
          sd.insert_or_assign("backoff_factor", 1.0);
          s.load_state_dict(sd);
        }),
        thrown([] {
          GradScaler s;
          auto sd = s.state_dict();
          sd.insert_or_assign("growth_interval", std::int64_t{0});
          s.load_state_dict(sd);
        })}},
  };
}

}  // namespace mixprec::errors_walk
