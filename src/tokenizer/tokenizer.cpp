#include "tokenizer/tokenizer.h"

#include <filesystem>

#include "base/error.h"
#include "base/mapped_file.h"
#include "base/strings.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"
#include "tokenizer/components.h"
#include "tokenizer/config.h"
#include "tokenizer/unicode.h"

namespace hearth {

using tok::AddedToken;
using tok::JsonView;

struct Tokenizer::Impl {
  std::unique_ptr<tok::Bpe> model;
  tok::AddedVocabulary added;
  std::unique_ptr<tok::Normalizer> normalizer;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer;
  std::unique_ptr<tok::PostProcessor> post_processor;
  std::unique_ptr<tok::Decoder> decoder;
  TokenizerConfig config;

  // Normalize, pre-tokenize and run the model over text between added tokens.
  void encode_text(std::string_view text, bool at_start, std::vector<int32_t>& ids) const;
};

namespace {

std::unique_ptr<tok::Bpe> make_model(const JsonView& model) {
  model.expect_object();
  // HF reads the model untagged when "type" is absent; BPE is the only one with merges.
  const std::string type = model.has("type") ? model.type() : (model.has("merges") ? "BPE" : "");
  if (type != "BPE") {
    throw Unsupported(model.origin() + ": tokenizer model '" + printable(type.empty() ? "(untyped)" : type) +
                      "' is not supported (only BPE)");
  }
  return std::make_unique<tok::Bpe>(model);
}

std::vector<AddedToken> read_added_tokens(const JsonView& root, const tok::Normalizer* normalizer) {
  std::vector<AddedToken> tokens;
  if (!root.has("added_tokens")) return tokens;
  const JsonView list = root.at("added_tokens");
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonView item = list.at(i);
    AddedToken t;
    const int64_t id = item.at("id").integer();
    if (id < 0 || id > INT32_MAX - 1) item.at("id").fail("is not a valid token id");
    t.id = static_cast<int32_t>(id);
    t.content = item.str("content");
    if (!tok::is_valid_utf8(t.content)) item.at("content").fail("is not valid UTF-8");
    t.special = item.bool_or("special", false);
    t.lstrip = item.bool_or("lstrip", false);
    t.rstrip = item.bool_or("rstrip", false);
    t.single_word = item.bool_or("single_word", false);
    t.normalized = item.bool_or("normalized", !t.special);
    t.decode_form = t.content;
    if (t.normalized && normalizer != nullptr) normalizer->normalize(t.decode_form);
    if (t.content.empty()) continue;  // HF ignores empty added tokens
    tokens.push_back(std::move(t));
  }
  return tokens;
}

JsonView optional_field(const JsonView& root, const char* key) {
  static const nlohmann::json kNull;
  return root.has(key) ? root.at(key) : JsonView(kNull, root.origin(), key);
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(const std::string& tokenizer_json_text, const std::string& origin) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(tokenizer_json_text);
  } catch (const nlohmann::json::exception& e) {
    throw FileError(origin, std::string("not valid JSON: ") + printable(e.what(), 400));
  }
  auto impl = std::make_unique<Impl>();
  try {
    const JsonView root(doc, origin, "");
    root.expect_object();
    impl->model = make_model(root.at("model"));
    impl->normalizer = tok::make_normalizer(optional_field(root, "normalizer"));
    impl->pre_tokenizer = tok::make_pre_tokenizer(optional_field(root, "pre_tokenizer"));
    impl->post_processor = tok::make_post_processor(optional_field(root, "post_processor"));
    impl->decoder = tok::make_decoder(optional_field(root, "decoder"));
    impl->added = tok::AddedVocabulary(read_added_tokens(root, impl->normalizer.get()));
  } catch (const nlohmann::json::exception& e) {  // a shape our typed access did not anticipate
    throw FileError(origin, printable(e.what(), 400));
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_json(const std::string& tokenizer_json_text, const std::string& origin,
                               TokenizerConfig config) {
  Tokenizer tok = from_json(tokenizer_json_text, origin);
  tok.impl_->config = std::move(config);
  return tok;
}

Tokenizer Tokenizer::load(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const fs::path dir(model_dir);
  const std::string json_path = (dir / "tokenizer.json").string();
  Tokenizer tok = from_json(read_text_file(json_path), json_path);
  const fs::path config_path = dir / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    tok.impl_->config = tok::parse_tokenizer_config(read_text_file(config_path.string()), config_path.string());
  }
  const fs::path template_path = dir / "chat_template.jinja";
  if (fs::exists(template_path)) tok.impl_->config.chat_template = read_text_file(template_path.string());
  return tok;
}

void Tokenizer::Impl::encode_text(std::string_view text, bool at_start, std::vector<int32_t>& ids) const {
  std::string normalized(text);
  if (normalizer) normalizer->normalize(normalized);
  std::vector<tok::Split> splits;
  added.split(normalized, /*normalized_trie=*/true, splits);
  std::vector<tok::Piece> pieces;
  for (const tok::Split& s : splits) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    pieces.clear();
    pieces.push_back({normalized.substr(s.begin, s.end - s.begin), at_start && s.begin == 0});
    if (pre_tokenizer) pre_tokenizer->pre_tokenize(pieces);
    for (const tok::Piece& p : pieces) model->tokenize(p.text, ids);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (!tok::is_valid_utf8(text)) throw InputError("tokenizer: input text is not valid UTF-8");
  std::vector<int32_t> ids;
  std::vector<tok::Split> splits;
  impl_->added.split(text, /*normalized_trie=*/false, splits);
  for (const tok::Split& s : splits) {
    if (s.id >= 0) {
      ids.push_back(s.id);
    } else {
      impl_->encode_text(text.substr(s.begin, s.end - s.begin), s.begin == 0, ids);
    }
  }
  if (add_special_tokens && impl_->post_processor) impl_->post_processor->process(ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const AddedToken* added = impl_->added.find(id);
    const std::string* s = added != nullptr ? &added->decode_form : impl_->model->id_to_token(id);
    if (s == nullptr) continue;  // unknown id: skipped, as HF does
    if (skip_special_tokens && impl_->added.is_special_content(*s)) continue;
    tokens.push_back(*s);
  }
  std::string out;
  if (impl_->decoder) {
    impl_->decoder->decode_chain(tokens);
    for (const std::string& t : tokens) out += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out += ' ';
      out += tokens[i];
    }
  }
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* t = impl_->added.find(token)) return t->id;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* t = impl_->added.find(id)) return t->content;
  const std::string* s = impl_->model->id_to_token(id);
  return s != nullptr ? *s : std::string();
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* t = impl_->added.find(id);
  return t != nullptr && t->special;
}

int64_t Tokenizer::vocab_size() const { return std::max(impl_->model->size(), impl_->added.max_id() + 1); }

const TokenizerConfig& Tokenizer::config() const { return impl_->config; }

}  // namespace hearth
