// Small string helpers that parse strictly (no silent partial parses).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hearth {

std::optional<int64_t> parse_int(std::string_view text);
std::optional<double> parse_double(std::string_view text);
std::vector<std::string> split(std::string_view text, char sep);
// "1,2,3" -> {1,2,3}; throws InputError naming `what` on a bad element.
std::vector<int32_t> parse_int_list(std::string_view text, std::string_view what);
std::string format_bytes(uint64_t bytes);
// Text from outside (tensor names, JSON keys, parser messages) made safe for a one-line error
// message: control characters escaped as \xNN, cut after max_chars with "...".
std::string printable(std::string_view text, size_t max_chars = 200);

}  // namespace hearth
