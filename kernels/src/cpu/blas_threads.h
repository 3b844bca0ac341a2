// Scoped single-threaded OpenBLAS. Used where OpenBLAS's own threads cost more than they give (small
// products) or would change the result (its partition depends on its thread count).
#pragma once

#include <cblas.h>

namespace mamba::cpu {

class BlasSingleThread {
public:
    BlasSingleThread() : saved_(openblas_get_num_threads()) {
        if (saved_ != 1) openblas_set_num_threads(1);
    }
    ~BlasSingleThread() {
        if (saved_ != 1) openblas_set_num_threads(saved_);
    }
    BlasSingleThread(const BlasSingleThread&) = delete;
    BlasSingleThread& operator=(const BlasSingleThread&) = delete;

private:
    int saved_;
};

}  // namespace mamba::cpu
