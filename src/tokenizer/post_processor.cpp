// Post-processors: special tokens around a single encoded sequence (HF tokenizers/src/processors).
// Pair templates are not needed by callers, so only the single-sequence forms are read.
#include <memory>

#include "base/error.h"
#include "base/strings.h"
#include "tokenizer/components.h"

namespace hearth::tok {

namespace {

// prefix + ids + suffix covers TemplateProcessing (single), RobertaProcessing and BertProcessing.
class AffixProcessor : public PostProcessor {
 public:
  AffixProcessor(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  void process(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
    ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  }

 private:
  std::vector<int32_t> prefix_, suffix_;
};

class NoOpProcessor : public PostProcessor {
 public:
  void process(std::vector<int32_t>&) const override {}
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& p : parts_) p->process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

int32_t token_id(const JsonView& json) {
  const int64_t id = json.integer();
  if (id < 0 || id > INT32_MAX) json.fail("is not a valid token id");
  return static_cast<int32_t>(id);
}

std::unique_ptr<PostProcessor> make_template(const JsonView& json) {
  const JsonView single = json.at("single");
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const JsonView item = single.at(i);
    if (item.has("Sequence")) {
      if (seen_sequence) item.fail("has a second sequence in a single-sequence template");
      seen_sequence = true;
      continue;
    }
    const std::string name = item.at("SpecialToken").str("id");
    const JsonView special = json.at("special_tokens").at(name.c_str());
    const JsonView ids = special.at("ids");
    for (size_t k = 0; k < ids.size(); ++k) (seen_sequence ? suffix : prefix).push_back(token_id(ids.at(k)));
  }
  return std::make_unique<AffixProcessor>(std::move(prefix), std::move(suffix));
}

// "cls": ["<s>", 0] style fields of RobertaProcessing / BertProcessing.
int32_t pair_id(const JsonView& json) {
  if (!json.is_array() || json.size() != 2) json.fail("expected [\"token\", id]");
  return token_id(json.at(size_t{1}));
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const JsonView& json, int depth) {
  if (json.is_null()) return nullptr;
  if (depth > kMaxComponentDepth) json.fail("nests Sequences too deeply");
  const std::string type = json.type();
  if (type == "TemplateProcessing") return make_template(json);
  if (type == "ByteLevel") return std::make_unique<NoOpProcessor>();  // only adjusts offsets
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    return std::make_unique<AffixProcessor>(std::vector<int32_t>{pair_id(json.at("cls"))},
                                            std::vector<int32_t>{pair_id(json.at("sep"))});
  }
  if (type == "Sequence") {
    const JsonView list = json.at("processors");
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto p = make_post_processor(list.at(i), depth + 1)) parts.push_back(std::move(p));
    }
    return std::make_unique<SequenceProcessor>(std::move(parts));
  }
  json.at("type").fail("post-processor type '" + printable(type) + "' is not supported");
}

}  // namespace hearth::tok
