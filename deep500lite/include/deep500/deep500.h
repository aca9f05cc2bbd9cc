// Deep500's include path for C++ operators, kept so that an operator written for Deep500
// compiles unchanged: this header is deep500lite/deep500lite.h, with the namespace deep500lite
// also reachable under Deep500's name, deep500 (deep500::CustomOperator, deep500::tensor_t).
#pragma once
#include <deep500lite/deep500lite.h>

namespace deep500 = deep500lite;
