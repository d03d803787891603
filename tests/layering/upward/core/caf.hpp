// A fixture for the layering test: core/ may not include CAF.
#pragma once
#include <caf/all.hpp>
#include "tensor/tensor.hpp"
