/// <reference types="vitest/config" />
import { defineConfig } from "vite";

// Django serves frontend/dist through whitenoise (STATICFILES_DIRS), so assets live under /static/.
export default defineConfig({
  base: "/static/",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    sourcemap: false,
    chunkSizeWarningLimit: 300,
  },
  test: {
    environment: "happy-dom",
    globals: true,
    include: ["src/**/*.test.ts"],
  },
});
