#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>

#include "base/error.h"
#include "base/strings.h"
#include "base/thread_pool.h"
#include "cli/flags.h"

namespace hearth {
namespace {

TEST(Strings, StrictIntegerLists) {
  EXPECT_EQ(parse_int_list("1,2,3", "x"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(parse_int_list("", "x").empty());
  EXPECT_THROW(parse_int_list("1,,2", "x"), InputError);
  EXPECT_THROW(parse_int_list("1,2a", "x"), InputError);
  EXPECT_THROW(parse_int_list("99999999999", "x"), InputError);
  EXPECT_FALSE(parse_int("1.5"));
  EXPECT_EQ(parse_double("0.25"), 0.25);
}

// Input quoted into an error (a role, a tensor name, a metadata string) cannot break its line:
// request_fuzz and gguf_model_fuzz found messages that did.
TEST(Errors, InputErrorsStayOneLine) {
  EXPECT_STREQ(InputError("unknown role 'a\nb\x7f'").what(), "unknown role 'a\\x0ab\\x7f'");
  EXPECT_STREQ(FileError("f.gguf", "general.architecture 'x\r\ty'").what(),
               "f.gguf: general.architecture 'x\\x0d\\x09y'");
  EXPECT_STREQ(Unsupported("caf\xc3\xa9 \"ok\"").what(), "caf\xc3\xa9 \"ok\"");  // UTF-8 and quotes stay
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
    }
  }
}

// Each thread's share (here the halves of [0, 1000)) goes in chunks that shrink along it, so that
// the last pieces of work, which another thread may take, are small ones.
TEST(ThreadPool, ChunksShrinkAlongEachShare) {
  ThreadPool pool(2);
  std::mutex m;
  std::map<int64_t, int64_t> sizes;  // begin -> size
  pool.parallel_for(1000, 1, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(m);
    sizes[b] = e - b;
  });
  ASSERT_EQ(sizes.size(), 8u);
  for (const auto& [first, end] : {std::pair<int64_t, int64_t>{0, 500}, {500, 1000}}) {
    ASSERT_TRUE(sizes.count(first)) << "no chunk starts the share at " << first;
    int64_t previous = end - first, at = first;
    for (auto it = sizes.find(first); it != sizes.end() && it->first < end; ++it) {
      EXPECT_EQ(it->first, at) << "chunks of the share at " << first << " are not contiguous";
      EXPECT_LE(it->second, previous) << "chunk at " << it->first;
      previous = it->second;
      at += it->second;
    }
    EXPECT_EQ(at, end);
    EXPECT_LE(previous * 4, sizes[first]);
  }
}

// A loop of one item per thread (or a few) is split evenly: no chunk is empty and none has more
// than one item over another, so with one item per thread each thread can take one (the
// bandwidth probe reads one slice per thread this way).
TEST(ThreadPool, FewItemsGetOneChunkEach) {
  for (int threads : {2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {int64_t{threads}, int64_t{2} * threads, int64_t{16}}) {
      std::mutex m;
      std::vector<int64_t> sizes;
      pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
        std::lock_guard<std::mutex> lock(m);
        sizes.push_back(e - b);
      });
      const int64_t chunks = std::min<int64_t>(n, int64_t{threads} * 4);
      EXPECT_EQ(static_cast<int64_t>(sizes.size()), chunks) << threads << " threads, n=" << n;
      for (int64_t s : sizes) EXPECT_TRUE(s == n / chunks || s == n / chunks + 1) << threads << " threads, n=" << n;
    }
  }
}

TEST(Flags, ParsesTypedValuesAndRefusesUnknownFlags) {
  std::string model;
  int64_t n = 0;
  double t = 0;
  bool sw = false;
  cli::Flags f("verb", "", "");
  f.positional("model", "", &model);
  f.add("model", "", &model);
  f.require("model");
  f.add("n", "", &n);
  f.add("t", "", &t);
  f.add("sw", "", &sw);
  EXPECT_TRUE(f.parse({"m", "--n", "3", "--t=0.5", "--sw"}));
  EXPECT_EQ(model, "m");
  EXPECT_EQ(n, 3);
  EXPECT_EQ(t, 0.5);
  EXPECT_TRUE(sw);
  auto parse = [](std::vector<std::string> args) {
    std::string model;
    int64_t n = 0;
    bool sw = false;
    cli::Flags f("verb", "", "");
    f.add("model", "", &model);
    f.require("model");
    f.add("n", "", &n);
    f.add("sw", "", &sw);
    return f.parse(args);
  };
  EXPECT_THROW(parse({"--model", "m", "--bogus", "1"}), InputError);
  EXPECT_THROW(parse({"--model", "m", "--n", "x"}), InputError);
  EXPECT_THROW(parse({"--model", "m", "--n"}), InputError);
  EXPECT_THROW(parse({"--n", "1"}), InputError);  // required --model missing
  EXPECT_THROW(parse({"--model", "m", "--sw=1"}), InputError);
  EXPECT_THROW(parse({"--model", "m", "--model", "n"}), InputError);
  EXPECT_THROW(parse({"--model", "m", "stray"}), InputError);
}

// An alias stands for its flag; a refused flag fails by name, alone or with =VALUE, but a value
// spelled like it (a path after --out) is a value.
TEST(Flags, AliasesAndRefusedFlags) {
  auto parse = [](std::vector<std::string> args, bool* q = nullptr, std::string* out = nullptr) {
    bool quantize = false;
    std::string path;
    cli::Flags f("verb", "", "");
    f.add("quantize", "", &quantize);
    f.add("out", "", &path);
    f.alias("-q", "quantize");
    f.refuse("--dtype", "other's --dtype is not implemented");
    f.refuse("-d", "other's -d is not implemented");
    const bool ok = f.parse(args);
    if (q) *q = quantize;
    if (out) *out = path;
    return ok;
  };
  bool q = false;
  std::string out;
  EXPECT_TRUE(parse({"-q", "--out", "-d"}, &q, &out));
  EXPECT_TRUE(q);
  EXPECT_EQ(out, "-d");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--dtype", "f16"}, {"--dtype=f16"}, {"-q", "-d"}}) {
    try {
      parse(args);
      ADD_FAILURE() << args.back() << " was not refused";
    } catch (const Unsupported& e) {
      EXPECT_NE(std::string(e.what()).find("is not implemented"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse({"-q", "-q"}), InputError);  // the alias counts as its flag: given twice
}

}  // namespace
}  // namespace hearth
