// CUDA graphs: the work a function queues on the device's stream, captured and instantiated once,
// then replayed with one launch. A decode step is some 350 kernels; launched one by one, the
// host's launch rate, not the GPU, sets its time (docs/architecture.md).
//
// Capture is relaxed: the allocator may call cudaMalloc while the work is recorded. Everything
// the work allocates or frees meanwhile belongs to the graph's pool (memory.cu) until the graph
// is destroyed.
#include <memory>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/graph.h"
#include "backends/cuda/timeline.cuh"
#include "base/error.h"

namespace hearth::cuda {
namespace {

class CudaGraph final : public DeviceGraph {
 public:
  CudaGraph(Device device, std::unique_ptr<GraphPool> pool, cudaGraphExec_t exec)
      : device_(device), pool_(std::move(pool)), exec_(exec) {}
  ~CudaGraph() override {
    // Its blocks go back to the cache only once the last replay has finished with them.
    const cudaStream_t s = use_device(device_);
    (void)cudaStreamSynchronize(s);
    (void)cudaGraphExecDestroy(exec_);
    dissolve_graph_pool(device_, pool_.get());
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void replay() override {
    const cudaStream_t s = use_device(device_);
    const bool recorded = timeline_wanted(++replays_);
    if (recorded) timeline_begin(s);
    HEARTH_CUDA_CHECK(cudaGraphLaunch(exec_, s));
    if (recorded) timeline_end(s);
  }

 private:
  Device device_;
  std::unique_ptr<GraphPool> pool_;
  cudaGraphExec_t exec_;
  uint64_t replays_ = 0;
};

}  // namespace

std::unique_ptr<DeviceGraph> record_graph(Device device, const std::function<void()>& work) {
  const cudaStream_t s = use_device(device);
  auto pool = std::make_unique<GraphPool>();
  cudaGraph_t graph = nullptr;
  begin_graph_pool(device, pool.get());
  HEARTH_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  try {
    work();
  } catch (...) {
    // Ends the capture (the stream is usable again) and drops what was recorded.
    if (cudaStreamEndCapture(s, &graph) == cudaSuccess && graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    end_graph_pool(device);
    dissolve_graph_pool(device, pool.get());
    throw;
  }
  const cudaError_t ended = cudaStreamEndCapture(s, &graph);
  end_graph_pool(device);
  if (ended != cudaSuccess) dissolve_graph_pool(device, pool.get());
  HEARTH_CUDA_CHECK(ended);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  if (made != cudaSuccess) dissolve_graph_pool(device, pool.get());
  HEARTH_CUDA_CHECK(made);
  return std::make_unique<CudaGraph>(device, std::move(pool), exec);
}

}  // namespace hearth::cuda
