"""The package as users get it: the wheel, the README's examples."""
