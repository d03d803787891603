// A fixture for the layering test: tensor/ may not include actors/.
#pragma once
#include "actors/protocol.hpp"
