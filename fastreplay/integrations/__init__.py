"""Drop-in backends for other RL frameworks' buffers.

Each adapter is a submodule imported on its own (``import
fastreplay.integrations.rlightning``); importing ``fastreplay`` or this
package imports none of them, nor torch.
"""
