// op_test: runs the op-case table (op_cases.cpp) on every backend and prints one line per case; with
// --time it also times each case. Exit status 1 when any case fails.
//
//   op_test [--backend cpu|cuda|ref] [--filter SUBSTR] [--time] [--reps N] [--big] [--seed N] [--list] [--verbose]
//           [--force-lowp]
//
// Backends: the CPU backend always, then every CUDA device (mamba::cudaDeviceCount()). `--backend ref` runs
// the table on the harness's own plain-loop backend instead (ref_ops.cpp), which proves the harness.
#include "op_test.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace optest {
std::shared_ptr<Ops> referenceBackend();  // ref_ops.cpp
}

using namespace optest;

namespace {

struct Options {
    std::string backend;  // "", "cpu", "cuda", "ref"
    std::string filter;
    bool time = false, big = false, list = false, verbose = false, forceLowp = false;
    int reps = 9;
    uint64_t seed = 20240601;
};

[[noreturn]] void usage(const char* msg) {
    std::fprintf(stderr,
                 "op_test: %s\n"
                 "usage: op_test [--backend cpu|cuda|ref] [--filter SUBSTR] [--time] [--reps N] [--big] [--seed N] [--list]\n"
                 "               [--verbose] [--force-lowp]\n",
                 msg);
    std::exit(2);
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage(("missing value after " + a).c_str());
            return argv[++i];
        };
        if (a == "--backend") {
            o.backend = value();
            if (o.backend != "cpu" && o.backend != "cuda" && o.backend != "ref") usage("--backend takes cpu, cuda or ref");
        } else if (a == "--filter") {
            o.filter = value();
        } else if (a == "--time") {
            o.time = true;
        } else if (a == "--big") {
            o.big = true;
        } else if (a == "--reps") {
            o.reps = std::max(1, std::atoi(value().c_str()));
        } else if (a == "--seed") {
            o.seed = std::strtoull(value().c_str(), nullptr, 10);
        } else if (a == "--force-lowp") {  // run the 16-bit cases even where lowp_storage is false
            o.forceLowp = true;
        } else if (a == "--list") {
            o.list = true;
        } else if (a == "--verbose" || a == "-v") {
            o.verbose = true;
        } else if (a == "--help" || a == "-h") {
            usage("help");
        } else {
            usage(("unknown argument " + a).c_str());
        }
    }
    return o;
}

/** FNV-1a of the case's name: each case's inputs depend only on its name and --seed, never on the filter. */
uint64_t caseSeed(uint64_t seed, const std::string& name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
    return h ^ (seed * 0x9E3779B97F4A7C15ull);
}

std::string caseName(const Case& c) {
    return c.op + " " + c.shape + " " + dtypeName(c.dtype) + " " + c.mode;
}

struct Tally {
    int passed = 0, failed = 0, skipped = 0;
};

/** The worst comparison: the largest err/tol (an exact comparison that differs counts as infinitely bad). */
const Compare* worst(const std::vector<Compare>& cs) {
    const Compare* w = nullptr;
    double wr = -1;
    for (const Compare& c : cs) {
        const double r = c.tol > 0 ? c.err / c.tol : (c.err > 0 ? INFINITY : 0);
        if (!w || r > wr || std::isnan(c.err)) {
            w = &c;
            wr = std::isnan(c.err) ? INFINITY : r;
        }
    }
    return w;
}

void printLine(const std::string& backend, const Case& c, const char* status, const std::string& detail) {
    std::printf("%-7s %-28s %-52s %-4s %-5s %s %s\n", backend.c_str(), c.op.c_str(), c.shape.c_str(), dtypeName(c.dtype),
                c.mode.c_str(), detail.c_str(), status);
}

std::string describe(const Compare& c) {
    char buf[160];
    if (c.metric == "bits")
        std::snprintf(buf, sizeof buf, "%-26s err=%-9.3g tol=%-7s", (c.what + " (bits)").c_str(), c.err, "0");
    else
        std::snprintf(buf, sizeof buf, "%-26s err=%-9.2e tol=%-7.1e", (c.what + " (" + c.metric + ")").c_str(), c.err, c.tol);
    return buf;
}

double seconds() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

/** Warm-up, then the median over `reps` samples of k calls each (k so one sample takes ≥ 0.2 ms). */
std::string timeCase(Ops& ops, Prepared& p, int reps) {
    auto sample = [&](int k) {
        const double t0 = seconds();
        for (int i = 0; i < k; ++i) p.call();
        ops.synchronize();
        return (seconds() - t0) / k;
    };
    sample(1);
    sample(1);
    const double one = sample(1);
    const int k = static_cast<int>(std::clamp(2e-4 / std::max(one, 1e-9), 1.0, 1000.0));
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) t.push_back(sample(k));
    std::sort(t.begin(), t.end());
    const double med = t[t.size() / 2];
    char buf[160];
    int n = std::snprintf(buf, sizeof buf, "%10.1f us", med * 1e6);
    if (p.bytes > 0) n += std::snprintf(buf + n, sizeof buf - n, " %8.1f GB/s", p.bytes / med * 1e-9);
    if (p.flops > 0) n += std::snprintf(buf + n, sizeof buf - n, " %8.1f GFLOP/s", p.flops / med * 1e-9);
    return buf;
}

void runCase(const std::string& backend, Ops& ops, const Case& c, const Options& o, Tally& tally) {
    std::vector<Compare> cmps;
    Prepared p;
    std::string error;
    try {
        p = c.prepare(ops, caseSeed(o.seed, caseName(c)));
        if (p.call) p.call();
        ops.synchronize();
        cmps = p.check();
    } catch (const std::exception& e) {
        error = e.what();
    }
    const Compare* w = error.empty() ? worst(cmps) : nullptr;
    const bool ok = error.empty() && (!w || w->ok()) &&
                    std::all_of(cmps.begin(), cmps.end(), [](const Compare& x) { return x.ok(); });
    std::string detail = error.empty() ? (w ? describe(*w) : std::string("(no outputs)")) : "threw: " + error;
    if (ok && o.time && p.call) {
        try {
            detail += timeCase(ops, p, o.reps);
        } catch (const std::exception& e) {
            detail += std::string(" timing threw: ") + e.what();
        }
    }
    printLine(backend, c, ok ? "PASS" : "FAIL", detail);
    if (!ok && o.verbose)
        for (const Compare& x : cmps) std::printf("        %s %s\n", describe(x).c_str(), x.ok() ? "ok" : "FAIL");
    std::fflush(stdout);
    (ok ? tally.passed : tally.failed)++;
}

bool selected(const Options& o, const std::string& name) {
    return o.filter.empty() || name.find(o.filter) != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    const std::vector<Case> cases = allCases();
    if (o.list) {
        for (const Case& c : cases)
            if (selected(o, caseName(c))) std::printf("%s%s\n", caseName(c).c_str(), c.big ? "   [big]" : "");
        std::printf("%zu cases\n", cases.size());
        return 0;
    }
    Tally tally;
    const double t0 = seconds();

    // The references themselves, against central differences and hand-worked bit patterns.
    for (const SelfCheck& s : referenceSelfChecks()) {
        const Case c{s.name, s.shape, DTYPE_F32, "-", NEED_NONE, false, nullptr};
        if (!selected(o, caseName(c))) continue;
        std::vector<Compare> cmps = s.run();
        const bool ok = std::all_of(cmps.begin(), cmps.end(), [](const Compare& x) { return x.ok(); });
        printLine("ref", c, ok ? "PASS" : "FAIL", describe(*worst(cmps)));
        (ok ? tally.passed : tally.failed)++;
    }

    struct Target {
        std::string name;
        std::shared_ptr<Ops> ops;
    };
    std::vector<Target> targets;
    if (o.backend == "ref") {
        targets.push_back({"refops", referenceBackend()});
    } else {
        if (o.backend.empty() || o.backend == "cpu") targets.push_back({"cpu", openBackend(DEVICE_CPU)});
        if (o.backend.empty() || o.backend == "cuda") {
            const int n = cudaDeviceCount();
            if (n == 0) std::printf("op_test: no CUDA device (%s)\n", cudaUnavailableReason().c_str());
            for (int d = 0; d < n; ++d) {
                try {
                    targets.push_back({"cuda:" + std::to_string(d), openBackend(d)});
                } catch (const std::exception& e) {
                    std::printf("cuda:%d  could not open the backend: %s FAIL\n", d, e.what());
                    tally.failed++;
                }
            }
        }
    }

    for (const Target& t : targets) {
        const Capabilities caps = t.ops->capabilities();
        std::printf("== %s: host=%d training=%d graphs=%d lowp_storage=%d%s\n", t.name.c_str(), caps.host, caps.training,
                    caps.graphs, caps.lowp_storage, t.name == "cpu" ? (" threads=" + std::to_string(cpuThreads())).c_str() : "");
        for (const Case& c : cases) {
            if (!selected(o, caseName(c))) continue;
            const char* why = nullptr;
            if (c.big && !o.big && !o.time) why = "big (--big or --time)";
            else if ((c.needs & NEED_TRAINING) && !caps.training) why = "no training ops";
            else if ((c.needs & NEED_LOWP) && !caps.lowp_storage && !o.forceLowp) why = "no 16-bit storage";
            else if ((c.needs & NEED_HOST_THREADS) && t.name != "cpu") why = "CPU thread counts";
            else if ((c.needs & NEED_GRAPHS) && !caps.graphs) why = "no graphs";
            if (why) {
                tally.skipped++;
                if (o.verbose) printLine(t.name, c, "SKIP", why);
                continue;
            }
            runCase(t.name, *t.ops, c, o, tally);
        }
    }
    std::printf("op_test: %.1f s, %zu cases in the table\n", seconds() - t0, cases.size());
    std::printf("op_test: %d passed, %d failed, %d skipped\n", tally.passed, tally.failed, tally.skipped);
    return tally.failed == 0 ? 0 : 1;
}
