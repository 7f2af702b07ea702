"""The Textual wizard. It only orchestrates: every decision is made by mxtrim_tui.core."""
