#include "common/cpu_eval.h"

#include <stdexcept>
#include <string>

#include "mlx/allocator.h"

namespace pagecheck {

namespace mx = mlx::core;

mx::cpu::CommandEncoder& begin_cpu_eval(
    const char* primitive_name,
    const std::vector<mx::array>& inputs,
    mx::array& out,
    mx::Stream stream) {
  for (const mx::array& input : inputs) {
    if (!input.flags().row_contiguous) {
      throw std::runtime_error(std::string("pagecheck: ") + primitive_name + " received a non-contiguous input");
    }
  }
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream);
  for (const mx::array& input : inputs) {
    encoder.set_input_array(input);
  }
  encoder.set_output_array(out);
  return encoder;
}

std::vector<mx::array> task_arrays(const std::vector<mx::array>& inputs, const mx::array& out) {
  std::vector<mx::array> arrays;
  arrays.reserve(inputs.size() + 1);
  for (const mx::array& input : inputs) {
    arrays.push_back(mx::array::unsafe_weak_copy(input));
  }
  arrays.push_back(mx::array::unsafe_weak_copy(out));
  return arrays;
}

} // namespace pagecheck
