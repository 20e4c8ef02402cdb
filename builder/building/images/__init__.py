"""The farm's images: Dockerfiles rendered from docker/, built by the engine, and local Debian bases."""
