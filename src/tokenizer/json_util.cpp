#include "tokenizer/json_util.h"

#include "base/error.h"
#include "base/strings.h"

namespace hearth::tok {

namespace {
std::string describe(const nlohmann::json& v) {
  if (v.is_structured()) return v.type_name();
  return std::string(v.type_name()) + " " +
         printable(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), 60);
}
}  // namespace

void JsonView::fail(const std::string& problem) const {
  throw FileError(*origin_,
                  (where_.empty() ? std::string("top level") : "'" + printable(where_) + "'") + " " + problem);
}

void JsonView::expect_object() const {
  if (!value_->is_object()) fail("expected an object, got " + describe(*value_));
}
void JsonView::expect_array() const {
  if (!value_->is_array()) fail("expected an array, got " + describe(*value_));
}

bool JsonView::has(const char* key) const {
  expect_object();
  auto it = value_->find(key);
  return it != value_->end() && !it->is_null();
}

JsonView JsonView::at(const char* key) const {
  expect_object();
  const std::string child = where_.empty() ? std::string(key) : where_ + "." + key;
  auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) JsonView(*value_, *origin_, child).fail("is missing");
  return JsonView(*it, *origin_, child);
}

JsonView JsonView::at(size_t index) const {
  expect_array();
  if (index >= value_->size()) fail("has no element " + std::to_string(index));
  return JsonView((*value_)[index], *origin_, where_ + "[" + std::to_string(index) + "]");
}

size_t JsonView::size() const {
  expect_array();
  return value_->size();
}

std::string JsonView::str() const {
  if (!value_->is_string()) fail("expected a string, got " + describe(*value_));
  return value_->get<std::string>();
}

bool JsonView::boolean() const {
  if (!value_->is_boolean()) fail("expected true or false, got " + describe(*value_));
  return value_->get<bool>();
}

int64_t JsonView::integer() const {
  if (!value_->is_number_integer()) fail("expected an integer, got " + describe(*value_));
  if (value_->is_number_unsigned() && value_->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    fail("is out of range");
  }
  return value_->get<int64_t>();
}

std::string JsonView::str_or(const char* key, const std::string& fallback) const {
  return has(key) ? at(key).str() : fallback;
}
bool JsonView::bool_or(const char* key, bool fallback) const { return has(key) ? at(key).boolean() : fallback; }
int64_t JsonView::int_or(const char* key, int64_t fallback) const { return has(key) ? at(key).integer() : fallback; }

}  // namespace hearth::tok
