#include "replica.h"

#include <vector>

namespace mamba {

TrainerReplica::TrainerReplica(ModelImpl& m, Ops& ops, int B, int T)
    : ops(ops), table(m.backbone.table), master_layout(StorageLayout::of(m.backbone.table, DTYPE_F32)),
      runner(m.backbone) {
    const int64_t P = table.totalSize();
    const BackboneDims& d = m.backbone.dims;
    const int64_t R = static_cast<int64_t>(B) * T;
    if (m.storesF32()) {
        masters = m.storageF32();
    } else {  // f32 masters exist only while a trainer needs them
        own_masters = Buffer(ops, P);
        masters = own_masters.data();
        for (int i = 0; i < table.count(); ++i) {
            std::vector<float> host(static_cast<size_t>(table[i].size));
            m.readParam(i, host.data());
            ops.upload(masters + table[i].offset, host.data(), table[i].size);
        }
    }
    grads = Buffer(ops, P);
    adam_m = Buffer(ops, P);
    adam_v = Buffer(ops, P);
    start_state = Buffer(ops, d.row_state * B);
    tape_start = Buffer(ops, d.row_state * B);
    work_state = Buffer(ops, d.row_state * B);
    end_grad = Buffer(ops, d.row_state * B);
    start_grad = Buffer(ops, d.row_state * B);
    if (d.vocab > 0) {
        ids_stage = Buffer(ops, R);
        lm_targets = Buffer(ops, R);
        row_loss = Buffer(ops, R);
        row_correct = Buffer(ops, R);
    } else {
        x_stage = Buffer(ops, R * d.in_width);
        dx_stage = Buffer(ops, R * d.in_width);
    }
    y_stage = Buffer(ops, R * d.d_model);
    dy_stage = Buffer(ops, R * d.d_model);
    runner.reserve(ops, B, T, BackboneRunner::tapeUse(ops, m.dtype));
}

}  // namespace mamba
