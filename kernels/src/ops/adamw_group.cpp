// Ops::adamwGroup's default: AdamW tensor by tensor, then each tensor's copy into the storage — the sequence the
// trainer ran before the grouped op existed, and the bits every backend's grouped kernel must give.
#include "core/errors.h"
#include "ops/ops.h"

#include <string>
#include <vector>

namespace mamba {

void Ops::adamwGroup(const AdamWGroupArgs& a) {
    if (a.count <= 0) return;
    std::vector<AdamWTensor> table(static_cast<size_t>(a.count));
    download(reinterpret_cast<float*>(table.data()), reinterpret_cast<const float*>(a.tensors),
             static_cast<int64_t>(table.size() * sizeof(AdamWTensor) / sizeof(float)));
    for (const AdamWTensor& t : table)
        if (t.offset < 0 || t.n < 0 || t.offset > a.n - t.n)
            fail("adamwGroup: tensor [" + std::to_string(t.offset) + ", +" + std::to_string(t.n) +
                 ") lies outside the " + std::to_string(a.n) + " floats");
    for (const AdamWTensor& t : table)
        adamw(a.p + t.offset, a.g + t.offset, a.m + t.offset, a.v + t.offset, t.n, a.f, t.decayed != 0);
    for (const AdamWTensor& t : table) {
        if (t.store_byte < 0) continue;
        if (!a.store) fail("adamwGroup: a tensor has a copy (store_byte " + std::to_string(t.store_byte) + ") but store is null");
        void* at = static_cast<char*>(a.store) + t.store_byte;
        if (t.store_dtype == DTYPE_F32) copy(static_cast<float*>(at), a.p + t.offset, t.n);
        else toLowPrecision(a.p + t.offset, at, t.n, t.store_dtype);
    }
}

}  // namespace mamba
