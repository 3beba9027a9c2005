"""A small example file for `lsp_server complete`."""
import math
from dataclasses import dataclass


@dataclass
class Circle:
    radius: float

    def area(self) -> float:
        return math.pi * self.radius ** 2

    def perimeter(self) -> float:
        return 2 * math.pi * self.radius


@dataclass
class Square:
    side: float

    def area(self) -> float:
        return self.side ** 2

    def perimeter(self) -> float:
        
