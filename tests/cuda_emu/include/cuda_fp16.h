// Host emulation stand-in for cuda_fp16.h (see ../emu.h).
#pragma once
#include "../emu.h"
