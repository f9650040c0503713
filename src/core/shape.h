#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "base/error.h"

namespace hearth {

// A tensor's dimensions, outermost first. Rank 0..kMaxRank.
class Shape {
 public:
  static constexpr int kMaxRank = 6;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    HEARTH_CHECK(dims.size() <= kMaxRank);
    for (int64_t d : dims) dims_[rank_++] = d;
  }
  template <typename It>
  static Shape from(It begin, It end) {
    Shape s;
    for (It it = begin; it != end; ++it) {
      HEARTH_CHECK(s.rank_ < kMaxRank);
      s.dims_[s.rank_++] = static_cast<int64_t>(*it);
    }
    return s;
  }

  int rank() const { return rank_; }
  int64_t operator[](int i) const {
    HEARTH_DCHECK(i >= 0 && i < rank_);
    return dims_[i];
  }
  int64_t dim(int i) const { return (*this)[i < 0 ? rank_ + i : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i)
      if (dims_[i] != o.dims_[i]) return false;
    return true;
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
    return s + "]";
  }

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace hearth
