#include "quantized_embedding/quantized_embedding.h"

#include <algorithm>
#include <climits>
#include <memory>
#include <stdexcept>
#include <vector>

#include "common/error_text.h"
#include "common/input_checks.h"
#include "common/ready_inputs.h"
#include "mlx/ops.h"
#include "quantized_embedding/id_validation.h"
#include "quantized_embedding/primitive.h"

namespace pagecheck {

namespace mx = mlx::core;

namespace {

template <size_t N>
void check_supported(const char* field, int value, const int (&supported)[N]) {
  if (std::find(std::begin(supported), std::end(supported), value) != std::end(supported)) {
    return;
  }
  ErrorText message;
  message << "pagecheck: " << field << " = " << value << " is not supported; use one of";
  for (int option : supported) {
    message << " " << option;
  }
  throw std::invalid_argument(message.str());
}

} // namespace

mx::array quantized_embedding(
    const mx::array& ids,
    const mx::array& weight,
    const mx::array& scales,
    const mx::array& biases,
    int group_size,
    int bits,
    mx::StreamOrDevice stream) {
  check_supported("bits", bits, kEmbeddingBits);
  check_supported("group_size", group_size, kEmbeddingGroupSizes);
  check_int32("ids", ids);
  check_ndim("weight", weight, 2, "[V, D * bits / 32]");
  check_ndim("scales", scales, 2, "[V, D / group_size]");
  check_ndim("biases", biases, 2, "[V, D / group_size]");
  if (weight.dtype() != mx::uint32) {
    ErrorText message;
    message << "pagecheck: weight must be uint32 (packed by mx.quantize), got " << weight.dtype();
    throw std::invalid_argument(message.str());
  }
  check_attention_dtype("scales", scales);
  if (biases.dtype() != scales.dtype()) {
    ErrorText message;
    message << "pagecheck: biases dtype " << biases.dtype() << " differs from scales dtype " << scales.dtype();
    throw std::invalid_argument(message.str());
  }
  if (biases.shape() != scales.shape()) {
    throw std::invalid_argument("pagecheck: biases shape " + shape_text(biases) + " differs from scales shape " +
                                shape_text(scales));
  }
  const int vocab_size = weight.shape(0);
  if (vocab_size == 0) {
    throw std::invalid_argument("pagecheck: weight shape " + shape_text(weight) + " has no rows");
  }
  check_dim_equal("scales", 0, scales, vocab_size, "weight rows V");
  const int64_t dims = static_cast<int64_t>(weight.shape(1)) * 32 / bits;
  if (static_cast<int64_t>(scales.shape(1)) * group_size != dims) {
    ErrorText message;
    message << "pagecheck: scales.shape[1] = " << scales.shape(1) << " must equal D / group_size = " << dims << " / "
            << group_size << " for weight shape " << shape_text(weight) << " at bits = " << bits;
    throw std::invalid_argument(message.str());
  }
  if (static_cast<int64_t>(ids.size()) * weight.shape(1) > INT_MAX) {
    ErrorText message;
    message << "pagecheck: ids.size = " << ids.size() << " times " << weight.shape(1)
            << " packed words per row exceeds one kernel launch (" << INT_MAX << " threads)";
    throw std::invalid_argument(message.str());
  }

  if (const std::optional<mx::array> id_values = host_int32_values(ids, stream)) {
    check_ids_in_range(id_values->data<int32_t>(), static_cast<int64_t>(id_values->size()), vocab_size);
  }
  const mx::array flat_ids = ids.ndim() == 1 ? ids : mx::reshape(ids, {static_cast<int>(ids.size())}, stream);
  std::vector<mx::array> inputs{
      row_contiguous_input(flat_ids, stream),
      row_contiguous_input(weight, stream),
      row_contiguous_input(scales, stream),
      row_contiguous_input(biases, stream)};
  auto primitive = std::make_shared<QuantizedEmbedding>(mx::to_stream(stream), group_size, bits);
  const mx::Shape rows_shape{static_cast<int>(ids.size()), static_cast<int>(dims)};
  mx::array rows = mx::array(rows_shape, scales.dtype(), primitive, std::move(inputs));
  mx::Shape out_shape = ids.shape();
  out_shape.push_back(static_cast<int>(dims));
  return mx::reshape(rows, out_shape, stream);
}

} // namespace pagecheck
