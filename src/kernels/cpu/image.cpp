#include "kernels/cpu/common.h"
#include "kernels/registry.h"

namespace onnxtrain::kernels {

void register_image(KernelRegistry& r) { (void)r; }

}  // namespace onnxtrain::kernels
