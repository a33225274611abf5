// bench/raw_gloo.cc - see raw_gloo.h. Timed as ../shared/anchors/gloo_allreduce.cc times
// Gloo (barrier, then the op, in place for allreduce and broadcast).
#include "bench/raw_gloo.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

extern "C" {
#include "core/affinity.h"
}

#include <chrono>
#include <cstdio>
#include <exception>
#include <vector>

static double now_us() {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

extern "C" int raw_gloo_run(const char *dir, const char *prefix, int world, int rank, int op,
                            size_t bytes, int iters, double *t, char *err, size_t errlen) {
    return raw_gloo_run_on("127.0.0.1", dir, prefix, world, rank, op, bytes, iters, t, err, errlen);
}

extern "C" int raw_gloo_run_on(const char *host, const char *dir, const char *prefix, int world,
                               int rank, int op, size_t bytes, int iters, double *t, char *err,
                               size_t errlen) {
    try {
        gloo::transport::tcp::attr attr(host);
        // As troupe's gloo backend does, the I/O thread gets the CPUs the rank had before
        // the node bound it (core/affinity.h): Gloo is measured, not a shared core.
        cpu_set_t saved;
        int widened = tr__affinity_widen(&saved);
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        if (widened) tr__affinity_restore(&saved);
        gloo::rendezvous::FileStore fs(dir);
        gloo::rendezvous::PrefixStore ps(prefix, fs);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
        ctx->setTimeout(std::chrono::seconds(60));
        ctx->connectFullMesh(ps, dev);
        size_t count = bytes / sizeof(float);
        std::vector<float> buf(count ? count : 1), out((count ? count : 1) * (size_t)world);
        using Fn = void (*)(void *, const void *, const void *, size_t);
        uint32_t tag = 1;
        for (int i = 0; i < iters; i++) {
            for (size_t k = 0; k < count; k++)
                buf[k] = float(rank + 1);
            gloo::BarrierOptions b(ctx);
            b.setTag(tag++);
            gloo::barrier(b);
            double t0 = now_us();
            if (op == RAW_GLOO_ALLREDUCE) {
                gloo::AllreduceOptions o(ctx);
                o.setOutput(buf.data(), count);
                o.setReduceFunction(static_cast<Fn>(&gloo::sum<float>));
                o.setTag(tag++);
                gloo::allreduce(o);
            } else if (op == RAW_GLOO_BROADCAST) {
                gloo::BroadcastOptions o(ctx);
                o.setOutput(buf.data(), count);
                o.setRoot(0);
                o.setTag(tag++);
                gloo::broadcast(o);
            } else {
                gloo::AllgatherOptions o(ctx);
                o.setInput(buf.data(), count);
                o.setOutput(out.data(), count * (size_t)world);
                o.setTag(tag++);
                gloo::allgather(o);
            }
            t[i] = now_us() - t0;
        }
        return 0;
    } catch (const std::exception &e) {
        snprintf(err, errlen, "raw gloo: %s", e.what());
    } catch (...) {
        snprintf(err, errlen, "raw gloo: unknown exception");
    }
    return -1;
}
