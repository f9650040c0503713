// Malformed inputs must end as one-line InputErrors that name the file and the problem:
// safetensors byte-level corruption, broken model directories (config.json, missing or
// misshapen tensors, bad shard indexes) and the CLI's exit status and stderr.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "formats/json_config.h"
#include "formats/safetensors.h"
#include "models/model.h"
#include "runtime/generation.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kFixture = fs::path(HEARTH_TEST_DATA) / "parity" / "qwen3";

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string test = info != nullptr ? info->name() : "test";
    path_ = fs::temp_directory_path() /
            ("hearth_bad_input_" + test + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A safetensors image: 8-byte little-endian header length, the header text, the data blob.
std::string safetensors_bytes(const std::string& header, const std::string& data, uint64_t header_len) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((header_len >> (8 * i)) & 0xff));
  return out + header + data;
}
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  return safetensors_bytes(header, data, header.size());
}

// Passes when `f` throws E whose message is one line, names `path` and contains `phrase`.
template <class E = InputError>
::testing::AssertionResult throws_input_error(const std::function<void()>& f, const std::string& path,
                                              const std::string& phrase) {
  try {
    f();
  } catch (const E& e) {
    const std::string msg = e.what();
    if (msg.find('\n') != std::string::npos) return ::testing::AssertionFailure() << "message spans lines: " << msg;
    if (msg.find(path) == std::string::npos) {
      return ::testing::AssertionFailure() << "message does not name " << path << ": " << msg;
    }
    if (msg.find(phrase) == std::string::npos) {
      return ::testing::AssertionFailure() << "message lacks '" << phrase << "': " << msg;
    }
    return ::testing::AssertionSuccess() << msg;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw the wrong exception type: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

// Writes a safetensors file from header text and data and checks that opening it fails.
::testing::AssertionResult bad_safetensors(const std::string& header, const std::string& data,
                                           const std::string& phrase) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_bytes(path, safetensors_bytes(header, data));
  return throws_input_error<FileError>([&] { SafetensorsFile::open(path); }, path, phrase);
}

std::string zeros(size_t n) { return std::string(n, '\0'); }

// ---- safetensors ---------------------------------------------------------------------------

TEST(formats_safetensors, ValidFileOpens) {
  TempDir dir;
  const std::string path = dir.file("ok.safetensors");
  write_bytes(path, safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                                      R"("__metadata__":{"format":"pt"}})",
                                      zeros(16)));
  auto f = SafetensorsFile::open(path);
  ASSERT_EQ(f->header().tensors.size(), 1u);
  EXPECT_EQ(f->header().metadata.at("format"), "pt");
  EXPECT_EQ(f->tensor(*f->find("a")).shape(), Shape({2, 2}));
}

TEST(formats_safetensors, TruncatedBelowEightBytes) {
  TempDir dir;
  const std::string path = dir.file("short.safetensors");
  write_bytes(path, std::string("\x05\0\0\0\0", 5));
  EXPECT_TRUE(throws_input_error<FileError>([&] { SafetensorsFile::open(path); }, path, "truncated"));
}

TEST(formats_safetensors, EmptyFile) {
  TempDir dir;
  const std::string path = dir.file("empty.safetensors");
  write_bytes(path, "");
  EXPECT_TRUE(throws_input_error<FileError>([&] { SafetensorsFile::open(path); }, path, "truncated"));
}

TEST(formats_safetensors, HeaderLengthBeyondFileSize) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_bytes(path, safetensors_bytes("{}", "", 1000));
  EXPECT_TRUE(
      throws_input_error<FileError>([&] { SafetensorsFile::open(path); }, path, "runs past the end of the file"));
}

TEST(formats_safetensors, HeaderLengthOverLimit) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_bytes(path, safetensors_bytes("{}", "", ~uint64_t{0}));
  EXPECT_TRUE(throws_input_error<FileError>([&] { SafetensorsFile::open(path); }, path, "exceeds the 100 MiB limit"));
}

TEST(formats_safetensors, HeaderNotJson) {
  EXPECT_TRUE(bad_safetensors("{\"a\": not json", "", "header is not valid JSON"));
}

TEST(formats_safetensors, HeaderNotJsonWithNewlines) {
  // The parser's "last read" excerpt must not carry the raw newline into the message.
  EXPECT_TRUE(bad_safetensors("{\n\"a\":\n oops", "", "header is not valid JSON"));
}

TEST(formats_safetensors, HeaderNumberOverflows) {
  // nlohmann reports an out-of-range number with out_of_range, not parse_error (found by fuzzing).
  EXPECT_TRUE(bad_safetensors(R"({"a":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}})", zeros(4),
                              "header is not valid JSON"));
}

TEST(formats_safetensors, HeaderNotAnObject) {
  EXPECT_TRUE(bad_safetensors("[1, 2, 3]", "", "header is not a JSON object"));
}

TEST(formats_safetensors, DataOffsetsPastTheData) {
  EXPECT_TRUE(bad_safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", zeros(8),
                              "lies outside the 8-byte data section"));
}

TEST(formats_safetensors, OverlappingOffsets) {
  EXPECT_TRUE(bad_safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                              R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                              zeros(24), "tensor 'b' overlaps"));
}

TEST(formats_safetensors, ReversedOffsets) {
  EXPECT_TRUE(bad_safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", zeros(16),
                              "data_offsets end before begin"));
}

TEST(formats_safetensors, GapBetweenTensors) {
  EXPECT_TRUE(bad_safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                              R"("b":{"dtype":"F32","shape":[4],"data_offsets":[20,36]}})",
                              zeros(36), "gap of 4 bytes before tensor 'b'"));
}

TEST(formats_safetensors, TrailingUnclaimedBytes) {
  EXPECT_TRUE(bad_safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", zeros(20),
                              "4 bytes after the last tensor are not described"));
}

TEST(formats_safetensors, UnknownDType) {
  EXPECT_TRUE(
      bad_safetensors(R"({"a":{"dtype":"Q9","shape":[4],"data_offsets":[0,16]}})", zeros(16), "unknown dtype 'Q9'"));
}

TEST(formats_safetensors, UnsupportedDType) {
  EXPECT_TRUE(bad_safetensors(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})", zeros(16),
                              "dtype F64, which Hearth does not load"));
}

TEST(formats_safetensors, ShapeDoesNotMatchByteSize) {
  EXPECT_TRUE(bad_safetensors(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", zeros(16),
                              "needs 12 bytes, data_offsets span 16"));
}

TEST(formats_safetensors, NegativeDim) {
  EXPECT_TRUE(
      bad_safetensors(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", zeros(16), "negative value -4"));
}

TEST(formats_safetensors, FractionalDim) {
  EXPECT_TRUE(bad_safetensors(R"({"a":{"dtype":"F32","shape":[4.5],"data_offsets":[0,16]}})", zeros(16),
                              "expected an integer"));
}

TEST(formats_safetensors, DataOffsetsNotAPair) {
  EXPECT_TRUE(bad_safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", zeros(16),
                              "data_offsets must be [begin, end]"));
  EXPECT_TRUE(bad_safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16,32]}})", zeros(16),
                              "data_offsets must be [begin, end]"));
  EXPECT_TRUE(bad_safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":"0-16"}})", zeros(16),
                              "data_offsets must be [begin, end]"));
}

TEST(formats_safetensors, MissingDType) {
  EXPECT_TRUE(
      bad_safetensors(R"({"a":{"shape":[4],"data_offsets":[0,16]}})", zeros(16), "tensor 'a': missing 'dtype'"));
}

TEST(formats_safetensors, MetadataValueNotAString) {
  EXPECT_TRUE(
      bad_safetensors(R"({"__metadata__":{"format":1}})", "", "__metadata__ value for 'format' is not a string"));
}

TEST(formats_safetensors, DimProductOverflows) {
  // 2^32 * 2^32 elements overflows uint64 before the dtype size is applied...
  EXPECT_TRUE(bad_safetensors(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})",
                              zeros(16), "size overflows"));
  // ...and 2^62 elements only once multiplied by 4 bytes.
  EXPECT_TRUE(bad_safetensors(R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,16]}})", zeros(16),
                              "size overflows"));
  // A dim beyond int64 cannot be a Shape dim at all.
  EXPECT_TRUE(bad_safetensors(R"({"a":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,16]}})", zeros(16),
                              "dimension too large"));
}

TEST(formats_safetensors, ControlCharactersInNamesStayOnOneLine) {
  // Names come from the file; a newline in one must not split the message.
  EXPECT_TRUE(bad_safetensors("{\"a\\nb\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", zeros(16),
                              "needs 12 bytes"));
  EXPECT_TRUE(
      bad_safetensors(R"({"a":{"dtype":"Q\n9","shape":[4],"data_offsets":[0,16]}})", zeros(16), "unknown dtype"));
  EXPECT_TRUE(bad_safetensors(R"({"__metadata__":{"x\ny":1}})", "", "is not a string"));
}

TEST(formats_safetensors, DeeplyNestedHeaderValue) {
  // A shape element nested a million arrays deep: an error, not a stack overflow.
  const int depth = 1000000;
  const std::string header = R"({"a":{"dtype":"F32","data_offsets":[0,16],"shape":[)" + std::string(depth, '[') +
                             std::string(depth, ']') + "]}}";
  EXPECT_TRUE(bad_safetensors(header, zeros(16), "expected an integer"));
}

// ---- config.json -----------------------------------------------------------------------------

TEST(formats_json_config, DeeplyNestedValues) {
  // Reading, reporting and taking a nested object must not recurse once per nesting level.
  const int depth = 1000000;
  const std::string deep = std::string(depth, '[') + std::string(depth, ']');
  const JsonConfig c =
      JsonConfig::parse(R"({"hidden_size": )" + deep + R"(, "rope_scaling": {"factor": )" + deep + "}}", "deep.json");
  EXPECT_TRUE(throws_input_error([&] { c.get_int("hidden_size"); }, "deep.json", "'hidden_size' expected an integer"));
  const std::optional<JsonConfig> rope = c.object("rope_scaling");
  ASSERT_TRUE(rope.has_value());
  EXPECT_TRUE(
      throws_input_error([&] { rope->get_float("factor"); }, "deep.json", "'rope_scaling.factor' expected a number"));
}

TEST(formats_json_config, NumberOverflowsDouble) {
  EXPECT_TRUE(throws_input_error<FileError>([] { JsonConfig::parse(R"({"rope_theta": 1e400})", "o.json"); }, "o.json",
                                            "not valid JSON"));
}

TEST(formats_json_config, IntegersOutOfRange) {
  const JsonConfig c = JsonConfig::parse(
      R"({"a": 1e30, "b": -1e300, "c": 18446744073709551615, "d": [1, 18446744073709551615], "e": 4.0})", "r.json");
  EXPECT_TRUE(throws_input_error([&] { c.get_int("a"); }, "r.json", "'a' expected an integer"));
  EXPECT_TRUE(throws_input_error([&] { c.get_int("b"); }, "r.json", "'b' expected an integer"));
  EXPECT_TRUE(throws_input_error([&] { c.get_int("c"); }, "r.json", "'c' is out of range"));
  EXPECT_TRUE(throws_input_error([&] { c.get_int_list("c"); }, "r.json", "'c' is out of range"));
  EXPECT_TRUE(throws_input_error([&] { c.get_int_list("d"); }, "r.json", "'d' has an out-of-range element"));
  EXPECT_EQ(c.get_int("e"), 4);
}

TEST(formats_json_config, ControlCharactersStayOnOneLine) {
  const JsonConfig c = JsonConfig::parse(R"({"m": {"a\nb": 1}})", "c.json");
  EXPECT_TRUE(throws_input_error([&] { c.object("m")->string_items(); }, "c.json", "expected a string"));
  EXPECT_TRUE(
      throws_input_error([&] { JsonConfig::parse("{\n\"a\": \"x\ny\"}", "c.json"); }, "c.json", "not valid JSON"));
}

// ---- model directories ---------------------------------------------------------------------

// A copy of the qwen3 fixture in a temp dir, to corrupt.
class ModelDirTest : public ::testing::Test {
 protected:
  void SetUp() override { fs::copy(kFixture, dir_.path(), fs::copy_options::recursive); }

  std::string dir() const { return dir_.path().string(); }
  std::string file(const std::string& name) const { return dir_.file(name); }

  json read_config() const { return json::parse(read_bytes(file("config.json"))); }
  void write_config(const json& config) const { write_bytes(file("config.json"), config.dump(2)); }

  // All tensors of the fixture's model.safetensors, in file order. The views keep the
  // original file mapped, so they survive it being replaced.
  static std::vector<std::pair<std::string, Tensor>> fixture_tensors() {
    auto f = SafetensorsFile::open((kFixture / "model.safetensors").string());
    std::vector<std::pair<std::string, Tensor>> out;
    for (const SafetensorsEntry& e : f->header().tensors) out.emplace_back(e.name, f->tensor(e));
    return out;
  }

  // Splits the weights into two shards plus model.safetensors.index.json; returns the weight map.
  json write_shards() const {
    const auto tensors = fixture_tensors();
    std::vector<std::pair<std::string, Tensor>> shard[2];
    json map = json::object();
    uint64_t total = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      shard[i % 2].push_back(tensors[i]);
      map[tensors[i].first] = kShard[i % 2];
      total += tensors[i].second.nbytes();
    }
    for (int s = 0; s < 2; ++s) write_safetensors(file(kShard[s]), shard[s]);
    fs::remove(file("model.safetensors"));
    write_index(map, total);
    return map;
  }
  void write_index(const json& map, uint64_t total = 0) const {
    write_bytes(file("model.safetensors.index.json"),
                json{{"metadata", {{"total_size", total}}}, {"weight_map", map}}.dump(2));
  }

  static constexpr const char* kShard[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};

 private:
  TempDir dir_;
};
// Suites are named formats_* so that `ctest -R formats` selects them.
using formats_model_dir = ModelDirTest;

std::vector<int32_t> greedy_tokens(const std::string& dir) {
  auto m = load_model(dir);
  ThreadPool pool(1);
  Engine engine(*m, Context{&pool, kCpu});
  GenerationRequest req;
  req.prompt = {1, 17, 42, 300, 999};
  req.max_tokens = 8;
  req.ignore_eos = true;
  GenerationStream s(engine, req);
  std::vector<int32_t> tokens;
  while (auto ev = s.next()) tokens.push_back(ev->token);
  return tokens;
}

TEST_F(formats_model_dir, CopyLoads) { EXPECT_EQ(greedy_tokens(dir()).size(), 8u); }

TEST_F(formats_model_dir, MissingTensor) {
  auto tensors = fixture_tensors();
  std::erase_if(tensors, [](const auto& t) { return t.first == "model.norm.weight"; });
  write_safetensors(file("model.safetensors"), tensors);
  EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, dir(), "missing tensor 'model.norm.weight'"));
}

TEST_F(formats_model_dir, TensorWithWrongShape) {
  auto tensors = fixture_tensors();
  for (auto& [name, t] : tensors) {
    if (name == "model.layers.0.mlp.up_proj.weight") t = Tensor::zeros({t.dim(0), t.dim(1) - 1}, t.dtype());
  }
  write_safetensors(file("model.safetensors"), tensors);
  EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, dir(),
                                            "tensor 'model.layers.0.mlp.up_proj.weight' has shape"));
}

TEST_F(formats_model_dir, UnknownModelType) {
  json c = read_config();
  c["model_type"] = "gpt9";
  write_config(c);
  EXPECT_TRUE(throws_input_error([&] { load_model(dir()); }, file("config.json"), "unknown model_type 'gpt9'"));
}

TEST_F(formats_model_dir, ConfigNotJson) {
  write_bytes(file("config.json"), "{\"model_type\": \"qwen3\",\n  \"hidden_size\": 64,,\n}");
  EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, file("config.json"), "not valid JSON"));
}

TEST_F(formats_model_dir, ConfigNumberOverflows) {
  std::string text = read_bytes(file("config.json"));
  const std::string from = "\"rms_norm_eps\": 1e-05";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "\"rms_norm_eps\": 1e99999");
  write_bytes(file("config.json"), text);
  EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, file("config.json"), "not valid JSON"));
}

// Values a config may type correctly yet hold out of their domain: each once loaded and then
// generated NaN logits or failed later with an unrelated message.
TEST_F(formats_model_dir, ConfigValuesOutOfTheirDomain) {
  const json base = read_config();
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"rms_norm_eps", -1}}, "'rms_norm_eps' must be in (0, 1)"},
      {{{"rms_norm_eps", 1e300}}, "'rms_norm_eps' must be in (0, 1)"},
      {{{"max_position_embeddings", 0}}, "'max_position_embeddings' must be positive"},
      {{{"max_position_embeddings", -1}}, "'max_position_embeddings' must be positive"},
      {{{"rope_scaling", {{"rope_type", "linear"}, {"factor", 0}}}}, "rotary frequency"},
      {{{"rope_scaling", {{"rope_type", "linear"}, {"factor", -1}}}}, "rotary frequency"},
      {{{"rope_scaling", {{"rope_type", "yarn"}, {"factor", -2}, {"original_max_position_embeddings", 64}}}},
       "rope_type 'yarn'"},
  };
  for (const auto& [edit, message] : cases) {
    json c = base;
    c.erase("rope_parameters");
    c.update(edit);
    write_config(c);
    EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, file("config.json"), message)) << edit.dump();
  }
}

TEST_F(formats_model_dir, ConfigNotAnObject) {
  write_bytes(file("config.json"), "[\"qwen3\"]");
  EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, file("config.json"), "expected a JSON object"));
}

TEST_F(formats_model_dir, ConfigFieldOfWrongType) {
  json c = read_config();
  c["hidden_size"] = "64";
  write_config(c);
  EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, file("config.json"),
                                            "'hidden_size' expected an integer"));
}

TEST_F(formats_model_dir, MissingConfig) {
  fs::remove(file("config.json"));
  EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, dir(), "no config.json"));
}

TEST_F(formats_model_dir, MissingRequiredKey) {
  json c = read_config();
  c.erase("num_hidden_layers");
  write_config(c);
  EXPECT_TRUE(
      throws_input_error<FileError>([&] { load_model(dir()); }, file("config.json"), "'num_hidden_layers' is missing"));
}

TEST_F(formats_model_dir, NoWeights) {
  fs::remove(file("model.safetensors"));
  EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, dir(), "no model.safetensors"));
}

TEST_F(formats_model_dir, ShardedModelMatchesSingleFile) {
  write_shards();
  ASSERT_FALSE(fs::exists(file("model.safetensors")));
  const std::vector<int32_t> sharded = greedy_tokens(dir());
  const std::vector<int32_t> single = greedy_tokens(kFixture.string());
  EXPECT_EQ(sharded.size(), 8u);
  EXPECT_EQ(sharded, single);
}

TEST_F(formats_model_dir, IndexNamesMissingShard) {
  json map = write_shards();
  map["model.norm.weight"] = "model-00003-of-00002.safetensors";
  write_index(map);
  EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, file("model-00003-of-00002.safetensors"),
                                            "cannot open"));
}

TEST_F(formats_model_dir, IndexListsTensorInNoShard) {
  json map = write_shards();
  map["model.layers.7.mlp.up_proj.weight"] = kShard[0];
  write_index(map);
  EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, file("model.safetensors.index.json"),
                                            "lists tensor 'model.layers.7.mlp.up_proj.weight' that is in no shard"));
}

TEST_F(formats_model_dir, IndexNamesWrongShard) {
  json map = write_shards();
  map["model.norm.weight"] = map["model.norm.weight"] == kShard[0] ? kShard[1] : kShard[0];
  write_index(map);
  EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, file("model.safetensors.index.json"),
                                            "says tensor 'model.norm.weight' is in"));
}

TEST_F(formats_model_dir, ShardNameWithSlash) {
  json map = write_shards();
  map["model.norm.weight"] = "../" + fs::path(dir()).filename().string() + "/" + kShard[0];
  write_index(map);
  EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, file("model.safetensors.index.json"),
                                            "is not a plain file name"));
}

TEST_F(formats_model_dir, ShardNameWithControlCharacter) {
  json map = write_shards();
  // A NUL would cut the path short when the file is opened: a different file than the one named.
  map["model.norm.weight"] = std::string(kShard[0]) + std::string("\0x", 2);
  write_index(map);
  EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, file("model.safetensors.index.json"),
                                            "is not a plain file name"));
}

TEST_F(formats_model_dir, IndexTensorNameWithNewline) {
  json map = write_shards();
  map["model.extra\nweight"] = kShard[0];
  write_index(map);
  EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, file("model.safetensors.index.json"),
                                            "that is in no shard"));
}

TEST_F(formats_model_dir, IndexWithoutWeightMap) {
  write_shards();
  write_bytes(file("model.safetensors.index.json"), R"({"metadata": {}})");
  EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, file("model.safetensors.index.json"),
                                            "missing 'weight_map'"));
}

TEST_F(formats_model_dir, IndexWeightMapValueNotAString) {
  json map = write_shards();
  map["model.norm.weight"] = 1;
  write_index(map);
  EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, file("model.safetensors.index.json"),
                                            "'weight_map.model.norm.weight' expected a string"));
}

TEST_F(formats_model_dir, CorruptWeightsFile) {
  std::string bytes = read_bytes(file("model.safetensors"));
  bytes.resize(bytes.size() - 100);
  write_bytes(file("model.safetensors"), bytes);
  EXPECT_TRUE(throws_input_error<FileError>([&] { load_model(dir()); }, file("model.safetensors"), "truncated file?"));
}

// ---- CLI -----------------------------------------------------------------------------------

struct CliResult {
  int exit_status = -1;
  std::string err;
};

CliResult run_cli(const std::string& args) {
  TempDir tmp;
  const std::string err_path = tmp.file("stderr.txt");
  const std::string cmd = std::string("'") + HEARTH_BINARY + "' " + args + " >/dev/null 2>'" + err_path + "'";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_bytes(err_path);
  return r;
}

::testing::AssertionResult one_error_line(const std::string& err) {
  if (err.rfind("hearth: error:", 0) != 0) return ::testing::AssertionFailure() << "stderr: " << err;
  if (err.find('\n') != err.size() - 1) return ::testing::AssertionFailure() << "not exactly one line: " << err;
  return ::testing::AssertionSuccess();
}

TEST_F(formats_model_dir, CliBrokenModelDirExitsOne) {
  write_bytes(file("config.json"), "{ not json");
  const CliResult r = run_cli("generate '" + dir() + "' --prompt-tokens 1,2,3 --max-tokens 2 --threads 1");
  EXPECT_EQ(r.exit_status, 1);
  EXPECT_TRUE(one_error_line(r.err));
  EXPECT_NE(r.err.find(file("config.json")), std::string::npos) << r.err;
}

TEST_F(formats_model_dir, CliMissingTensorExitsOne) {
  auto tensors = fixture_tensors();
  tensors.pop_back();
  write_safetensors(file("model.safetensors"), tensors);
  const CliResult r = run_cli("generate '" + dir() + "' --prompt-tokens 1,2,3 --max-tokens 2 --threads 1");
  EXPECT_EQ(r.exit_status, 1);
  EXPECT_TRUE(one_error_line(r.err));
  EXPECT_NE(r.err.find("missing tensor"), std::string::npos) << r.err;
}

TEST(formats_cli, UnknownFlagExitsOne) {
  const CliResult r = run_cli("generate --bogus 1");
  EXPECT_EQ(r.exit_status, 1);
  EXPECT_TRUE(one_error_line(r.err));
  EXPECT_NE(r.err.find("--bogus"), std::string::npos) << r.err;
}

// Out-of-range flag values name the flag and the range, not a bound the value does not break.
TEST(formats_cli, OutOfRangeFlagValuesNameTheRange) {
  const std::pair<std::string, std::string> cases[] = {
      {"serve --prompt-cache 1000000", "--prompt-cache: expected GB in [0, 1000000)"},
      {"serve --prompt-cache nan", "--prompt-cache: expected GB in [0, 1000000)"},
      {"generate " + kFixture.string() + " --prompt-tokens 1 --threads 100000", "--threads: expected a count 0..4096"},
  };
  for (const auto& [args, message] : cases) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_status, 1) << args;
    EXPECT_TRUE(one_error_line(r.err)) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ": " << r.err;
  }
}

}  // namespace
}  // namespace hearth
