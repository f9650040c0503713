#include "core/bandwidth.h"

#include <array>

#include "base/error.h"

namespace hearth {
namespace {

std::array<BandwidthProbeFn, 2>& probes() {
  static std::array<BandwidthProbeFn, 2> fns{};
  return fns;
}

}  // namespace

void register_bandwidth_probe(DeviceType type, BandwidthProbeFn fn) { probes()[static_cast<size_t>(type)] = fn; }

BandwidthResult measure_read_bandwidth(Context& ctx, const BandwidthProbe& probe) {
  if (probe.passes < 1) throw InputError("bandwidth probe: passes must be >= 1");
  BandwidthProbeFn fn = probes()[static_cast<size_t>(ctx.device.type)];
  if (fn == nullptr) throw Unsupported("no bandwidth probe for device " + ctx.device.str() + " in this build");
  return fn(ctx, probe);
}

}  // namespace hearth
