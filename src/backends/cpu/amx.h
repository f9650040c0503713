// AMX tiles (Intel Sapphire Rapids and later): what the tile kernels share. Eight tile registers
// of up to 16 rows x 64 bytes, shaped per thread by a configuration (ldtilecfg) that lasts until
// released (tilerelease). has_amx() (isa.h) says whether the CPU has them and Linux granted them.
#pragma once

#include <cstdint>

namespace hearth::cpu {

// The 64-byte operand of ldtilecfg (palette 1): each tile's rows and bytes per row.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  void shape(int tile, int n_rows, int bytes_per_row) {
    rows[tile] = static_cast<uint8_t>(n_rows);
    colsb[tile] = static_cast<uint16_t>(bytes_per_row);
  }
  // ldtilecfg for this thread, with all 64 bytes as the operand: GCC 12's _tile_loadconfig names
  // only the first 8, and the compiler then dropped the stores of the shapes (every tile left
  // unconfigured, so the first tile instruction raised SIGILL).
  __attribute__((target("amx-tile"))) void load() const { __asm__ volatile("ldtilecfg %0" ::"m"(*this)); }
};
static_assert(sizeof(TileConfig) == 64);

}  // namespace hearth::cpu
