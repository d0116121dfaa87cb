import { describe, expect, it } from "vitest";
import { SeriesBuffer } from "./series";

describe("SeriesBuffer", () => {
  it("keeps at most maxPoints samples", () => {
    const buffer = new SeriesBuffer(2, 5, 1e9);
    for (let t = 1; t <= 12; t++) buffer.push(t, [t, t * 2]);
    expect(buffer.length).toBe(5);
    expect(buffer.times).toEqual([8, 9, 10, 11, 12]);
    expect(buffer.values[1]).toEqual([16, 18, 20, 22, 24]);
  });

  it("drops samples older than the window and out-of-order samples", () => {
    const buffer = new SeriesBuffer(1, 100, 10);
    buffer.push(100, [1]);
    buffer.push(105, [2]);
    expect(buffer.push(104, [9])).toBe(false);
    buffer.push(120, [3]);
    expect(buffer.times).toEqual([120]);
  });

  it("stores missing and non-finite values as null", () => {
    const buffer = new SeriesBuffer(3);
    buffer.push(1, [null, undefined, Number.NaN]);
    expect(buffer.columns()).toEqual([[1], [null], [null], [null]]);
  });

  it("reset sorts rows by time", () => {
    const buffer = new SeriesBuffer(1);
    buffer.reset([
      { t: 3, values: [30] },
      { t: 1, values: [10] },
    ]);
    expect(buffer.columns()).toEqual([[1, 3], [10, 30]]);
  });
});
