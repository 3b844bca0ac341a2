// The Mamba-3 SISO cases of the table (mamba3Scan, mamba3ScanBackward), registered from allCases().
#include "op_test.h"
#include "reference_mamba3.h"

namespace optest {

std::vector<Case> mamba3Cases() { return {}; }
std::vector<Case> mamba3TrainingCases() { return {}; }

}  // namespace optest
