// Gloo behind gloo_shim.h's C interface: a rendezvous::Store over the
// caller's store, the TCP device and Gloo's collectives, every exception
// turned into a return code and a message.
#include "comm/gloo_shim.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <csignal>

namespace {

// Gloo's rendezvous keys, through the caller's store under "gloo/".
class ShimStore : public gloo::rendezvous::Store {
 public:
  ShimStore(const gloo_store_ops& ops, double timeout_ms) : ops_(ops), timeout_ms_(timeout_ms) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    char err[512];
    if (ops_.set(ops_.ctx, name(key).c_str(), data.data(), data.size(), err, sizeof err) != 0)
      throw std::runtime_error(err);
  }

  std::vector<char> get(const std::string& key) override { return fetch(key, timeout_ms_); }

  void wait(const std::vector<std::string>& keys) override { wait(keys, ms(timeout_ms_)); }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    for (const auto& key : keys) fetch(key, static_cast<double>(t.count()));
  }

 private:
  static std::chrono::milliseconds ms(double v) {
    return std::chrono::milliseconds(static_cast<int64_t>(v));
  }
  static std::string name(const std::string& key) { return "gloo/" + key; }

  std::vector<char> fetch(const std::string& key, double timeout_ms) {
    char err[512];
    void* val = nullptr;
    size_t len = 0;
    if (ops_.get(ops_.ctx, name(key).c_str(), &val, &len, timeout_ms, err, sizeof err) != 0)
      throw std::runtime_error(err);
    std::vector<char> out(static_cast<char*>(val), static_cast<char*>(val) + len);
    free(val);
    return out;
  }

  gloo_store_ops ops_;
  double timeout_ms_;
};

// Gloo's FileStore in a shared folder, every key under this run's prefix.
class DirStore : public gloo::rendezvous::Store {
 public:
  DirStore(const std::string& dir, const std::string& prefix, double timeout_ms)
      : files_(dir), prefix_(prefix),
        timeout_(std::chrono::milliseconds(static_cast<int64_t>(timeout_ms))) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    files_.set(prefix_ + key, data);
  }

  std::vector<char> get(const std::string& key) override {
    files_.wait({prefix_ + key}, timeout_);
    return files_.get(prefix_ + key);
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    std::vector<std::string> named;
    for (const auto& key : keys) named.push_back(prefix_ + key);
    files_.wait(named, t);
  }

  // The files of the keys this rank set (once every rank has read them).
  void remove_own() {
    for (const auto& path : files_.getAllKeyFilePaths()) std::remove(path.c_str());
  }

 private:
  gloo::rendezvous::FileStore files_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

// bfloat16 as float and back, rounding to nearest even (as the ring does).
float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

void bf16_sum(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<uint16_t*>(c);
  auto* x = static_cast<const uint16_t*>(a);
  auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; i++) out[i] = float_to_bf16(bf16_to_float(x[i]) + bf16_to_float(y[i]));
}

void f32_sum(void* c, const void* a, const void* b, size_t n) {
  gloo::sum<float>(c, a, b, n);
}

// The slots of the reduce-scatter's messages: a prefix beyond Gloo's own
// (gloo/types.h: 0x01..0x08), with the call's tag.
constexpr uint8_t kReduceScatterSlotPrefix = 0x80;

// Where each rank's chunk of n elements of es bytes begins, in bytes, and
// (at [size]) where the buffer ends: comm_chunk_range's split, n*i/size.
std::vector<size_t> chunk_offsets(size_t n, int size, size_t es) {
  std::vector<size_t> off(static_cast<size_t>(size) + 1);
  for (int i = 0; i <= size; i++) off[i] = n * static_cast<size_t>(i) / static_cast<size_t>(size) * es;
  return off;
}

// Each rank's chunk in elements, as allgatherv takes them.
std::vector<size_t> chunk_counts(size_t n, int size) {
  std::vector<size_t> off = chunk_offsets(n, size, 1), counts;
  for (int i = 0; i < size; i++) counts.push_back(off[i + 1] - off[i]);
  return counts;
}

int fail(const std::exception& e, char* err, size_t len) {
  std::snprintf(err, len, "Gloo: %s", e.what());
  return std::strstr(e.what(), "Timed out") || std::strstr(e.what(), "timed out")
             ? GLOO_SHIM_TIMEOUT : GLOO_SHIM_ERROR;
}

}  // namespace

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

struct gloo_shim {
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::chrono::milliseconds timeout;
  uint32_t tag = 0;  // each call's own, the same sequence on every rank
};

namespace {

// Runs a collective's body; an exception becomes a return code and err.
template <class Body>
int guarded(char* err, size_t errlen, Body body) {
  try {
    body();
    return GLOO_SHIM_OK;
  } catch (const std::exception& e) {
    return fail(e, err, errlen);
  }
}

// The call's own tag (the same sequence on every rank) and the group's timeout.
template <class Opts>
void stamp(gloo_shim* g, Opts& opts) {
  opts.setTag(g->tag++);
  opts.setTimeout(g->timeout);
}

// A sum of n elements of buf, in place: bfloat16 or float.
template <class Opts>
void sum_in_place(Opts& opts, void* buf, size_t n, int bf16) {
  if (bf16) {
    opts.setOutput(static_cast<uint16_t*>(buf), n);
    opts.setReduceFunction(bf16_sum);
  } else {
    opts.setOutput(static_cast<float*>(buf), n);
    opts.setReduceFunction(f32_sum);
  }
}

// A ring reduce-scatter on Gloo's unbound buffers, as Gloo's own ring
// collectives (allgatherv, allreduce) send and receive: in step s rank r
// sends its chunk r-s-1 to rank r+1 and adds chunk r-s-2 from rank r-1 into
// its own, so that after size-1 steps chunk r holds every rank's sum (the
// shared-memory ring's order). Gloo's own ReduceScatterHalvingDoubling, of
// its older algorithms, takes int counts, leaves the result at the buffer's
// start, has no bfloat16 and no per-call tag or timeout. Empty chunks (fewer
// elements than ranks) are neither sent nor received, on both sides alike.
void ring_reduce_scatter(gloo_shim* g, char* buf, size_t n, size_t es, ReduceFn sum) {
  const auto& ctx = g->context;
  const int size = ctx->size, rank = ctx->rank;
  const auto slot = gloo::Slot::build(kReduceScatterSlotPrefix, g->tag++);
  const std::vector<size_t> off = chunk_offsets(n, size, es);
  size_t most = es;
  for (int i = 0; i < size; i++) most = std::max(most, off[i + 1] - off[i]);
  std::vector<char> tmp(most);
  auto out = ctx->createUnboundBuffer(buf, n * es);
  auto in = ctx->createUnboundBuffer(tmp.data(), tmp.size());
  for (int s = 0; s < size - 1; s++) {
    const int send = (rank - s - 1 + 2 * size) % size, recv = (rank - s - 2 + 2 * size) % size;
    const size_t send_bytes = off[send + 1] - off[send], recv_bytes = off[recv + 1] - off[recv];
    if (send_bytes) out->send((rank + 1) % size, slot, off[send], send_bytes);
    if (recv_bytes) {
      in->recv((rank + size - 1) % size, slot, 0, recv_bytes);
      if (!in->waitRecv(g->timeout)) throw std::runtime_error("reduce-scatter: receive aborted");
      sum(buf + off[recv], buf + off[recv], tmp.data(), recv_bytes / es);
    }
    if (send_bytes && !out->waitSend(g->timeout))
      throw std::runtime_error("reduce-scatter: send aborted");
  }
}

}  // namespace

namespace {

// Gloo's TCP pairs write with writev: a peer gone would raise SIGPIPE and
// end the process before the write's error is seen (Gloo's own tests ignore
// it; Python does for PyTorch).
void ignore_sigpipe() {
  struct sigaction old;
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    struct sigaction ign = {};
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, nullptr);
  }
}

}  // namespace

extern "C" int gloo_shim_open(int rank, int size, const char* addr, const char* iface,
                              double timeout_ms, const gloo_rendezvous* rv, gloo_shim** out,
                              char* err, size_t errlen) {
  ignore_sigpipe();
  try {
    gloo::transport::tcp::attr attr;
    if (iface && *iface) attr.iface = iface;
    else attr.hostname = addr;
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    auto g = std::make_unique<gloo_shim>();
    g->timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_ms > 0 ? timeout_ms : 864e5));
    g->context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    g->context->setTimeout(g->timeout);
    if (rv->dir) {
      DirStore dir_store(rv->dir, rv->prefix, timeout_ms > 0 ? timeout_ms : 864e5);
      g->context->connectFullMesh(dir_store, dev);
      gloo::BarrierOptions opts(g->context);  // every rank has read every address
      stamp(g.get(), opts);
      gloo::barrier(opts);
      dir_store.remove_own();
    } else {
      ShimStore shim_store(*rv->store, timeout_ms);
      g->context->connectFullMesh(shim_store, dev);
    }
    *out = g.release();
    return GLOO_SHIM_OK;
  } catch (const std::exception& e) {
    return fail(e, err, errlen);
  }
}

extern "C" int gloo_shim_allreduce(gloo_shim* g, void* buf, size_t n, int bf16, char* err,
                                   size_t errlen) {
  return guarded(err, errlen, [&] {
    gloo::AllreduceOptions opts(g->context);
    sum_in_place(opts, buf, n, bf16);
    stamp(g, opts);
    gloo::allreduce(opts);
  });
}

extern "C" int gloo_shim_reduce_scatter(gloo_shim* g, void* buf, size_t n, int bf16, char* err,
                                        size_t errlen) {
  return guarded(err, errlen, [&] {
    if (bf16) ring_reduce_scatter(g, static_cast<char*>(buf), n, sizeof(uint16_t), bf16_sum);
    else ring_reduce_scatter(g, static_cast<char*>(buf), n, sizeof(float), f32_sum);
  });
}

// Gloo's ring allgatherv in place (no input: each rank's chunk is already
// in its place of the output), the chunks comm_chunk_range's.
extern "C" int gloo_shim_all_gather(gloo_shim* g, void* buf, size_t n, int bf16, char* err,
                                    size_t errlen) {
  return guarded(err, errlen, [&] {
    gloo::AllgathervOptions opts(g->context);
    if (bf16) opts.setOutput(static_cast<uint16_t*>(buf), chunk_counts(n, g->context->size));
    else opts.setOutput(static_cast<float*>(buf), chunk_counts(n, g->context->size));
    stamp(g, opts);
    gloo::allgatherv(opts);
  });
}

extern "C" int gloo_shim_broadcast(gloo_shim* g, void* buf, size_t bytes, int root, char* err,
                                   size_t errlen) {
  return guarded(err, errlen, [&] {
    gloo::BroadcastOptions opts(g->context);
    opts.setOutput(static_cast<uint8_t*>(buf), bytes);
    opts.setRoot(root);
    stamp(g, opts);
    gloo::broadcast(opts);
  });
}

extern "C" int gloo_shim_barrier(gloo_shim* g, char* err, size_t errlen) {
  return guarded(err, errlen, [&] {
    gloo::BarrierOptions opts(g->context);
    stamp(g, opts);
    gloo::barrier(opts);
  });
}

extern "C" void gloo_shim_abort(gloo_shim* g) {
  try {
    g->context->closeConnections();
  } catch (...) {
    // already closed: the peers see their connections end either way
  }
}

extern "C" void gloo_shim_close(gloo_shim* g) { delete g; }
