"""The Mamba block (Mamba-1), on the selective-scan op; ``step()`` decodes one token.

Same parameters, initialisation and state layout as upstream mamba's
``mamba_ssm.modules.mamba_simple.Mamba``, so checkpoints load unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mamba_ssm.ops.selective_scan_interface import selective_scan_fn


class Mamba(nn.Module):
    def __init__(self, d_model, d_state=16, d_conv=4, expand=2, dt_rank="auto", dt_min=0.001, dt_max=0.1,
                 dt_init="random", dt_scale=1.0, dt_init_floor=1e-4, conv_bias=True, bias=False,
                 use_fast_path=True, layer_idx=None, device=None, dtype=None):
        factory = {"device": device, "dtype": dtype}
        super().__init__()
        self.d_model, self.d_state, self.d_conv, self.expand = d_model, d_state, d_conv, expand
        self.d_inner = int(expand * d_model)
        self.dt_rank = math.ceil(d_model / 16) if dt_rank == "auto" else dt_rank
        self.use_fast_path = use_fast_path  # kept for API compatibility; the scan op is always used
        self.layer_idx = layer_idx

        self.in_proj = nn.Linear(d_model, self.d_inner * 2, bias=bias, **factory)
        self.conv1d = nn.Conv1d(self.d_inner, self.d_inner, kernel_size=d_conv, groups=self.d_inner,
                                padding=d_conv - 1, bias=conv_bias, **factory)
        self.act = nn.SiLU()
        self.x_proj = nn.Linear(self.d_inner, self.dt_rank + d_state * 2, bias=False, **factory)
        self.dt_proj = nn.Linear(self.dt_rank, self.d_inner, bias=True, **factory)

        # dt_proj: weights keep the variance of dt; the bias makes softplus(bias) ~ U[dt_min, dt_max] (log scale)
        std = self.dt_rank**-0.5 * dt_scale
        if dt_init == "constant":
            nn.init.constant_(self.dt_proj.weight, std)
        elif dt_init == "random":
            nn.init.uniform_(self.dt_proj.weight, -std, std)
        else:
            raise ValueError(f"dt_init must be 'constant' or 'random', got {dt_init!r}")
        dt = torch.exp(torch.rand(self.d_inner, **factory) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
        dt = dt.clamp(min=dt_init_floor)
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse of softplus
        self.dt_proj.bias._no_reinit = True

        # S4D-real initialisation: A = -[1..N] for every channel, stored as log
        A = torch.arange(1, d_state + 1, dtype=torch.float32, device=device).repeat(self.d_inner, 1)
        self.A_log = nn.Parameter(torch.log(A))
        self.A_log._no_weight_decay = True
        self.D = nn.Parameter(torch.ones(self.d_inner, device=device))
        self.D._no_weight_decay = True
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=bias, **factory)

    def forward(self, hidden_states, inference_params=None):
        """hidden_states: (batch, seqlen, d_model) -> same shape."""
        batch, seqlen, _ = hidden_states.shape
        conv_state = ssm_state = None
        if inference_params is not None:
            conv_state, ssm_state = self._states_from_cache(inference_params, batch)
            if inference_params.seqlen_offset > 0:  # decoding: one token at a time
                out, _, _ = self.step(hidden_states, conv_state, ssm_state)
                return out

        xz = self.in_proj(hidden_states).transpose(1, 2)  # (batch, 2 * d_inner, seqlen)
        x, z = xz.chunk(2, dim=1)
        if conv_state is not None:  # keep the last d_conv inputs for step()
            conv_state.copy_(F.pad(x, (self.d_conv - x.shape[-1], 0)))
        x = self.act(self.conv1d(x)[..., :seqlen])
        dt, B, C = torch.split(self.x_proj(x.transpose(1, 2)), [self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = (dt @ self.dt_proj.weight.t()).transpose(1, 2)  # bias goes in as delta_bias
        A = -torch.exp(self.A_log.float())
        y = selective_scan_fn(
            x, dt, A, B.transpose(1, 2).contiguous(), C.transpose(1, 2).contiguous(), self.D.float(), z=z,
            delta_bias=self.dt_proj.bias.float(), delta_softplus=True, return_last_state=ssm_state is not None,
        )
        if ssm_state is not None:
            y, last_state = y
            ssm_state.copy_(last_state)
        return self.out_proj(y.transpose(1, 2))

    def step(self, hidden_states, conv_state, ssm_state):
        """One token: hidden_states (batch, 1, d_model); updates conv_state and ssm_state in place."""
        if hidden_states.shape[1] != 1:
            raise ValueError(f"step() decodes one token at a time, got seqlen {hidden_states.shape[1]}")
        dtype = hidden_states.dtype
        x, z = self.in_proj(hidden_states.squeeze(1)).chunk(2, dim=-1)  # (batch, d_inner) each

        conv_state.copy_(torch.roll(conv_state, shifts=-1, dims=-1))
        conv_state[:, :, -1] = x
        x = torch.sum(conv_state * self.conv1d.weight.squeeze(1), dim=-1)
        if self.conv1d.bias is not None:
            x = x + self.conv1d.bias
        x = self.act(x).to(dtype)

        dt, B, C = torch.split(self.x_proj(x), [self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = F.softplus(F.linear(dt, self.dt_proj.weight) + self.dt_proj.bias.to(dt.dtype))
        A = -torch.exp(self.A_log.float())
        dA = torch.exp(torch.einsum("bd,dn->bdn", dt.float(), A))
        dBx = torch.einsum("bd,bn->bdn", (dt * x).float(), B.float())
        ssm_state.copy_(ssm_state * dA + dBx)
        y = torch.einsum("bdn,bn->bd", ssm_state.to(dtype), C) + self.D.to(dtype) * x
        y = y * self.act(z)
        return self.out_proj(y).unsqueeze(1), conv_state, ssm_state

    def allocate_inference_cache(self, batch_size, max_seqlen=None, dtype=None, **kwargs):
        device = self.out_proj.weight.device
        conv_dtype = self.conv1d.weight.dtype if dtype is None else dtype
        conv_state = torch.zeros(batch_size, self.d_inner, self.d_conv, device=device, dtype=conv_dtype)
        ssm_dtype = self.dt_proj.weight.dtype if dtype is None else dtype
        ssm_state = torch.zeros(batch_size, self.d_inner, self.d_state, device=device, dtype=ssm_dtype)
        return conv_state, ssm_state

    def _states_from_cache(self, inference_params, batch_size):
        if self.layer_idx is None:
            raise ValueError("Mamba(layer_idx=...) is required to decode with inference_params")
        cache = inference_params.key_value_memory_dict
        if self.layer_idx not in cache:
            cache[self.layer_idx] = self.allocate_inference_cache(batch_size)
        return cache[self.layer_idx]
